package p2p

import (
	"errors"
	"sync/atomic"

	"github.com/idlegrid/idlegrid/market"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

// Reasons a MarketValidator gives for its verdicts. The set is fixed,
// whatever peers send, so a metric labelled by reason stays bounded; each
// reason belongs to one verdict (reasonVerdicts).
const (
	ReasonOK             = "ok"              // accepted
	ReasonPeerBudget     = "peer_budget"     // ignored unread: the relay spent its budget (PeerRates)
	ReasonStrangerBudget = "stranger_budget" // ignored unread: all strangers spent theirs (StrangerRates)
	ReasonExpired        = "expired"         // ignored: past its expiry
	ReasonFuture         = "future"          // ignored: made further ahead than the clock skew allows
	ReasonStaleSeq       = "stale_seq"       // ignored: a sequence number not above the last seen
	ReasonIssuerCap      = "issuer_cap"      // ignored: its issuer holds its cap of IDs
	ReasonIDsFull        = "ids_full"        // ignored: this node holds its limit of IDs
	ReasonUnchecked      = "unchecked"       // ignored: evidence this node cannot check (no CC roots)
	ReasonTooLarge       = "too_large"       // rejected: over the size limit
	ReasonSignature      = "signature"       // rejected: an envelope that does not verify
	ReasonWrongIssuer    = "wrong_issuer"    // rejected: signed by another key than its issuer's
	ReasonInvalid        = "invalid"         // rejected: malformed or out of bounds (market.ErrInvalid)
	ReasonUnproven       = "unproven"        // rejected: evidence that proves no one cheated
	ReasonWrongShard     = "wrong_shard"     // rejected: gossiped on a shard it is not of
	ReasonUnknownShard   = "unknown_shard"   // ignored: of a GPU the catalog lacks, on a shard it cannot judge
	ReasonOther          = "other"           // rejected, for none of the reasons above
)

// Verdicts as metrics name them.
const (
	VerdictAccept = "accept"
	VerdictReject = "reject"
	VerdictIgnore = "ignore"
)

// reasonVerdicts is the verdict each reason comes with.
var reasonVerdicts = map[string]pubsub.ValidationResult{
	ReasonOK:         pubsub.ValidationAccept,
	ReasonPeerBudget: pubsub.ValidationIgnore, ReasonStrangerBudget: pubsub.ValidationIgnore,
	ReasonExpired: pubsub.ValidationIgnore, ReasonFuture: pubsub.ValidationIgnore, ReasonStaleSeq: pubsub.ValidationIgnore,
	ReasonIssuerCap: pubsub.ValidationIgnore, ReasonIDsFull: pubsub.ValidationIgnore, ReasonUnchecked: pubsub.ValidationIgnore,
	ReasonTooLarge: pubsub.ValidationReject, ReasonSignature: pubsub.ValidationReject, ReasonWrongIssuer: pubsub.ValidationReject,
	ReasonInvalid: pubsub.ValidationReject, ReasonUnproven: pubsub.ValidationReject, ReasonOther: pubsub.ValidationReject,
	ReasonWrongShard: pubsub.ValidationReject, ReasonUnknownShard: pubsub.ValidationIgnore,
}

// topicReasons are the reasons each topic's validator can give, in the
// order they are reported.
var topicReasons = map[string][]string{
	TopicOffers:   marketReasons,
	TopicBids:     marketReasons,
	TopicEvidence: {ReasonOK, ReasonPeerBudget, ReasonUnchecked, ReasonUnproven},
}

var marketReasons = []string{
	ReasonOK, ReasonPeerBudget, ReasonStrangerBudget, ReasonExpired, ReasonFuture, ReasonStaleSeq, ReasonIssuerCap, ReasonIDsFull,
	ReasonTooLarge, ReasonSignature, ReasonWrongIssuer, ReasonInvalid, ReasonWrongShard, ReasonUnknownShard, ReasonOther,
}

// verdictName is how metrics name a verdict.
func verdictName(r pubsub.ValidationResult) string {
	switch r {
	case pubsub.ValidationAccept:
		return VerdictAccept
	case pubsub.ValidationReject:
		return VerdictReject
	}
	return VerdictIgnore
}

// rejectReason names what is provably wrong with a message that failed
// to open or validate.
func rejectReason(err error) string {
	switch {
	case errors.Is(err, market.ErrTooLarge):
		return ReasonTooLarge
	case errors.Is(err, market.ErrSignature):
		return ReasonSignature
	case errors.Is(err, market.ErrWrongIssuer):
		return ReasonWrongIssuer
	case errors.Is(err, market.ErrInvalid):
		return ReasonInvalid
	case errors.Is(err, errWrongShard):
		return ReasonWrongShard
	}
	return ReasonOther
}

// verdictCounts counts verdicts by topic kind and reason. Its maps are
// built whole at construction and only read after, so counting takes no
// lock.
type verdictCounts map[string]map[string]*atomic.Int64

func newVerdictCounts() verdictCounts {
	c := verdictCounts{}
	for kind, reasons := range topicReasons {
		c[kind] = make(map[string]*atomic.Int64, len(reasons))
		for _, r := range reasons {
			c[kind][r] = new(atomic.Int64)
		}
	}
	return c
}

// judge counts a verdict on a message of kind, for reason, and returns it.
func (v *MarketValidator) judge(kind, reason string) pubsub.ValidationResult {
	res, ok := reasonVerdicts[reason]
	if !ok {
		res, reason = pubsub.ValidationReject, ReasonOther
	}
	if c := v.verdicts[kind][reason]; c != nil {
		c.Add(1)
	}
	switch res {
	case pubsub.ValidationAccept:
		v.Accepted.Add(1)
	case pubsub.ValidationReject:
		v.Rejected.Add(1)
	default:
		v.Ignored.Add(1)
	}
	return res
}

// EachVerdict calls f with the count of every verdict v can give, by
// topic kind, verdict (accept, reject or ignore) and reason, zeros
// included, in a fixed order: gossiped messages and those that came by
// book sync alike.
func (v *MarketValidator) EachVerdict(f func(topic, verdict, reason string, n int64)) {
	for _, kind := range TopicKinds {
		for _, r := range topicReasons[kind] {
			f(kind, verdictName(reasonVerdicts[r]), r, v.verdicts[kind][r].Load())
		}
	}
}
