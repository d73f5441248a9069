package p2p

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MarketValidator checks every offer and bid gossiped in the swarm before
// pubsub delivers or forwards it: it verifies the signed envelope once,
// validates the content at the local time, and lets only a sequence number
// higher than any seen for the (issuer, id) through. The verified message
// rides along in Message.ValidatorData, so subscribers never verify again.
//
// Verdicts: Reject what is provably bad (a forged or malformed message; the
// peer that sent it loses score), Ignore what is merely stale (expired,
// from a clock too far ahead, an old or repeated sequence number).
//
// Every peer gets a budget per topic (PeerRates): messages beyond it are
// ignored unread, and what a peer sends beyond it or beyond its issuers'
// caps lowers its gossipsub score (AppScore), so a peer relaying valid
// spam is pruned from the mesh and then graylisted.
type MarketValidator struct {
	limits market.Limits
	seqs   *SeqGuard
	now    func() time.Time
	log    *slog.Logger
	budget map[string]*peerBudget // by topic kind
	// strangers meters, by topic kind, the messages of issuers vouched
	// does not name, from all peers together, shared fairly among them;
	// issuers meters each of those issuers (admit says how).
	strangers map[string]*sharedBudget
	issuers   map[string]*issuerBudget
	vouched   func(peer.ID) bool // nil: none
	sources   func(peer.ID) bool // book-sync sources chosen by the operator; nil: none
	roots     *x509.CertPool     // for CC evidence; nil: none checked
	verdicts  verdictCounts      // by topic kind and reason (EachVerdict)

	// Counts of verdicts, for tests; EachVerdict says why.
	Accepted, Rejected, Ignored atomic.Int64
}

// NewMarketValidator returns a validator; now is the clock (time.Now in a
// node, a fixed clock in tests).
func NewMarketValidator(l market.Limits, seqs *SeqGuard, now func() time.Time, log *slog.Logger) *MarketValidator {
	if log == nil {
		log = slog.Default()
	}
	v := &MarketValidator{limits: l, seqs: seqs, now: now, log: log, budget: map[string]*peerBudget{}, verdicts: newVerdictCounts()}
	for kind, r := range PeerRates {
		v.budget[kind] = newPeerBudget(r.PerSecond, r.Burst)
	}
	v.strangers, v.issuers = map[string]*sharedBudget{}, map[string]*issuerBudget{}
	for kind, r := range StrangerRates {
		v.strangers[kind] = newSharedBudget(r.PerSecond, r.Burst)
	}
	for kind, r := range IssuerRates {
		v.issuers[kind] = newIssuerBudget(r.PerSecond, r.Burst)
	}
	return v
}

// WithVouched names the issuers this node vouches for (its own key, a
// provider it attested: what cost more than a key or a connection, since
// both cost an attacker nothing): their messages pass by the issuers' and
// the strangers' budgets, and by a relay's spent budget to be checked in
// full (StrangerRates says why). Set it before Install.
func (v *MarketValidator) WithVouched(vouched func(peer.ID) bool) *MarketValidator {
	v.vouched = vouched
	return v
}

// WithSyncSources names the peers whose books this node takes whole by
// book sync: the bootstrap peers its operator configured, which a
// stranger cannot become by connecting. Their synced offers spend their
// issuers' budgets (IssuerRates) but not the strangers' budget, so a
// fresh node's first sync brings the market, not a share of it; what
// they serve is only what they admitted themselves. Set it before
// Install.
func (v *MarketValidator) WithSyncSources(sources func(peer.ID) bool) *MarketValidator {
	v.sources = sources
	return v
}

// WithCCRoots makes v check CC evidence against roots, which settles
// claims across two peers (attest.VerifyEvidence); set it before Install.
func (v *MarketValidator) WithCCRoots(roots *x509.CertPool) *MarketValidator {
	v.roots = roots
	return v
}

// Rate is a sustained rate and a burst, in messages.
type Rate struct{ PerSecond, Burst float64 }

// PeerRates are what one peer may hand a node per topic: far above what
// an honest swarm relays (ten thousand providers re-publishing every
// three quarters of an hour make about four offers a second), far below
// a flood.
var PeerRates = map[string]Rate{TopicOffers: {50, 500}, TopicBids: {20, 200}, TopicEvidence: {1, 20}}

// StrangerRates are what a node takes of messages whose issuers it does
// not vouch for, from all peers together, by gossip and book sync alike,
// whether or not the issuer is connected: half of what one peer may hand
// it (PeerRates). Each peer draws on it within its share (sharedBudget),
// so peers that flood spend their own shares, not an honest relay's.
// Keys cost nothing, so a flood can always be valid; this bound keeps
// what an honest node relays of one within what its neighbours take of
// it from one peer, so that relaying a flood never costs an honest peer
// its score. A copy refused for a spent budget is dropped before
// gossipsub reads it (Gossip.SetAdmission), so the next copy, from
// another relay, may still bring the message. Messages of issuers a node
// vouches for are not metered by it, so a flood of strangers never
// crowds them out; they are checked in full even from a relay that spent
// its budget (which still counts the excess against the relay), since
// every relay of a flood may have spent its own.
var StrangerRates = map[string]Rate{TopicOffers: {25, 250}, TopicBids: {10, 100}}

// excessWeight is the score a unit of excess costs: a peer is out of the
// gossip threshold after 50 messages beyond its budget, graylisted after
// 250, and forgiven as its excess decays.
const excessWeight = 10

// AppScore is the gossipsub application-specific score of p: minus its
// excess on every topic, weighted.
func (v *MarketValidator) AppScore(p peer.ID) float64 {
	now, sum := v.now(), 0.0
	for _, b := range v.budget {
		sum += b.excess(p, now)
	}
	return -excessWeight * sum
}

// within spends one of from's tokens for kind; a message beyond the
// budget is ignored.
func (v *MarketValidator) within(kind string, from peer.ID) bool {
	if v.budget[kind].take(from, v.now()) {
		return true
	}
	v.judge(kind, ReasonPeerBudget)
	v.log.Debug("ignored market message", "topic", kind, "from", from, "why", "the peer's budget is spent")
	return false
}

// Install sets the validators of the offers, bids and evidence topics,
// the peers' application-specific score, and the budgets (admit) as the
// gossip's admission, which meters offers and bids before gossipsub
// reads them (Gossip.SetAdmission says why), so the validators check
// only what was let in, and what this node publishes itself.
func (v *MarketValidator) Install(g *Gossip) error {
	g.SetAppScore(v.AppScore)
	g.SetAdmission(func(kind string, from peer.ID, data []byte) bool {
		return v.strangers[kind] == nil || v.admit(kind, from, data, byGossip) // evidence: its validator meters it
	}, func(kind string, from peer.ID) {
		if b := v.budget[kind]; b != nil {
			b.take(from, v.now())
		}
	})
	for kind, b := range v.strangers {
		b.class = func(p peer.ID) int { // the mesh's relays share half the strangers' budget
			if g.InMesh(kind, p) {
				return 1
			}
			return 0
		}
	}
	for kind, fn := range map[string]pubsub.ValidatorEx{
		TopicOffers:   v.validateOffer,
		TopicBids:     v.validateBid,
		TopicEvidence: v.validateEvidence,
	} {
		if err := g.SetValidator(kind, fn); err != nil {
			return err
		}
	}
	return nil
}

// validateOffer checks a gossiped offer. On a shard's topic the offer
// must be of that shard; and the same offer at the same sequence number
// may come again, since it is gossiped on its kind's topic and on each
// of its shards, each a message of its own (see ShardedKinds).
func (v *MarketValidator) validateOffer(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	o, res := v.checkOffer(ctx, msg.Data, false, shardOfTopic(msg.GetTopic()))
	if res == pubsub.ValidationAccept {
		msg.ValidatorData = o
	}
	return res
}

func (v *MarketValidator) validateBid(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	b, res := v.checkBid(msg.Data, shardOfTopic(msg.GetTopic()))
	if res == pubsub.ValidationAccept {
		msg.ValidatorData = b
	}
	return res
}

var (
	errWrongShard   = errors.New("gossiped on a shard it is not of")
	errUnknownShard = errors.New("of a GPU this node's catalog does not know, on a shard it cannot judge")
)

// shardErr says whether a message of shards may come on shard: not if it
// is none of them, unless one is ShardOther (a GPU this node's catalog
// lacks, which a newer catalog may put in shard): that is no proof, and
// the message is ignored rather than rejected.
func shardErr(shards []string, shard string) error {
	switch {
	case slices.Contains(shards, shard):
		return nil
	case slices.Contains(shards, ShardOther):
		return errUnknownShard
	}
	return errWrongShard
}

// validateEvidence accepts evidence whose signed documents prove the
// offenders it names (attest.VerifyEvidence), passing them on in
// ValidatorData as []peer.ID, and rejects anything else: evidence that does
// not prove cheating is an attempt to frame someone. Evidence this node
// cannot check (two peers' claims, and no CC roots here) is ignored: a
// node with roots may rightly have relayed it.
func (v *MarketValidator) validateEvidence(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	if !v.within(TopicEvidence, from) {
		return pubsub.ValidationIgnore
	}
	offenders, err := attest.VerifyEvidence(msg.Data, v.limits.Swarm, v.roots)
	if errors.Is(err, attest.ErrEvidenceUnchecked) {
		v.log.Debug("ignored evidence", "from", from, "err", err)
		return v.judge(TopicEvidence, ReasonUnchecked)
	}
	if err != nil {
		v.log.Debug("rejected evidence", "from", from, "err", err)
		return v.judge(TopicEvidence, ReasonUnproven)
	}
	msg.ValidatorData = offenders
	return v.judge(TopicEvidence, ReasonOK)
}

// CheckEvidence verifies evidence that came otherwise than by gossip (by
// evidence sync): the offenders it proves, in this node's swarm, or why
// not.
func (v *MarketValidator) CheckEvidence(data []byte) ([]peer.ID, error) {
	return attest.VerifyEvidence(data, v.limits.Swarm, v.roots)
}

// CheckOffer runs the whole check on one offer envelope, however it came:
// signature, content at the local time, sequence. The offer is returned
// only with ValidationAccept. A gossiped offer needs a sequence number
// above any seen; one from book sync may equal it, so that a restarted
// node can take back what it held (its book lives in memory).
func (v *MarketValidator) CheckOffer(ctx context.Context, data []byte) (*pb.Offer, pubsub.ValidationResult) {
	return v.checkOffer(ctx, data, false, "")
}

// CheckSyncedOffer is CheckOffer for an envelope that came by book sync;
// it checks, and spends no budget: a node takes what it syncs through
// SyncedOffer, which admits it first as it would a gossiped one.
func (v *MarketValidator) CheckSyncedOffer(ctx context.Context, data []byte) (*pb.Offer, pubsub.ValidationResult) {
	return v.checkOffer(ctx, data, true, "")
}

// checkOffer checks an offer, from book sync where synced, from a shard's
// topic where shard is not "".
func (v *MarketValidator) checkOffer(_ context.Context, data []byte, synced bool, shard string) (*pb.Offer, pubsub.ValidationResult) {
	o, err := market.Open[*pb.Offer](data)
	if err == nil {
		err = v.limits.ValidateOffer(o, v.now())
	}
	if err == nil && shard != "" {
		err = shardErr(OfferShards(o), shard)
	}
	if res := v.verdict(TopicOffers, o, err, synced || shard != ""); res != pubsub.ValidationAccept {
		return nil, res
	}
	return o, pubsub.ValidationAccept
}

// CheckBid is CheckOffer for bids.
func (v *MarketValidator) CheckBid(_ context.Context, data []byte) (*pb.Bid, pubsub.ValidationResult) {
	return v.checkBid(data, "")
}

// checkBid checks a bid, from a shard's topic where shard is not "".
func (v *MarketValidator) checkBid(data []byte, shard string) (*pb.Bid, pubsub.ValidationResult) {
	b, err := market.Open[*pb.Bid](data)
	if err == nil {
		err = v.limits.ValidateBid(b, v.now())
	}
	if err == nil && shard != "" {
		err = shardErr(BidShards(b), shard)
	}
	if res := v.verdict(TopicBids, b, err, shard != ""); res != pubsub.ValidationAccept {
		return nil, res
	}
	return b, pubsub.ValidationAccept
}

// header is what verdict needs of an opened message.
type header interface{ GetHeader() *pb.Header }

// verdict decides on an opened message, however it came.
func (v *MarketValidator) verdict(kind string, m header, err error, equalOK bool) pubsub.ValidationResult {
	switch {
	case errors.Is(err, market.ErrExpired):
		v.log.Debug("ignored market message", "topic", kind, "err", err)
		return v.judge(kind, ReasonExpired)
	case errors.Is(err, market.ErrFuture):
		v.log.Debug("ignored market message", "topic", kind, "err", err)
		return v.judge(kind, ReasonFuture)
	case errors.Is(err, errUnknownShard):
		v.log.Debug("ignored market message", "topic", kind, "err", err)
		return v.judge(kind, ReasonUnknownShard)
	case err != nil:
		v.log.Debug("rejected market message", "topic", kind, "err", err)
		return v.judge(kind, rejectReason(err))
	}
	h := m.GetHeader()
	switch v.seqs.Advance(kind, peer.ID(h.Issuer), h.Id, h.Seq, h.ExpiresUnixMs, equalOK) {
	case SeqStale:
		v.log.Debug("ignored market message", "topic", kind, "issuer", peer.ID(h.Issuer), "id", h.Id, "seq", h.Seq, "why", "sequence not above the last seen")
		return v.judge(kind, ReasonStaleSeq)
	case SeqOverCap: // no fault of the relay's either: which IDs of an issuer a node took first differs from node to node
		v.log.Debug("ignored market message", "topic", kind, "issuer", peer.ID(h.Issuer), "id", h.Id, "why", "the issuer holds its cap of IDs")
		return v.judge(kind, ReasonIssuerCap)
	case SeqFull: // no fault of the relay's: the swarm holds more than this node keeps
		v.log.Debug("ignored market message", "topic", kind, "issuer", peer.ID(h.Issuer), "id", h.Id, "why", "this node holds its limit of IDs and does not vouch for the issuer")
		return v.judge(kind, ReasonIDsFull)
	}
	return v.judge(kind, ReasonOK)
}
