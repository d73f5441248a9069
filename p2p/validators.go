package p2p

import (
	"context"
	"errors"
	"log/slog"
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
type MarketValidator struct {
	limits market.Limits
	seqs   *SeqGuard
	now    func() time.Time
	log    *slog.Logger

	// Counts of verdicts, for metrics and tests.
	Accepted, Rejected, Ignored atomic.Int64
}

// NewMarketValidator returns a validator; now is the clock (time.Now in a
// node, a fixed clock in tests).
func NewMarketValidator(l market.Limits, seqs *SeqGuard, now func() time.Time, log *slog.Logger) *MarketValidator {
	if log == nil {
		log = slog.Default()
	}
	return &MarketValidator{limits: l, seqs: seqs, now: now, log: log}
}

// Install sets the validators of the offers, bids and evidence topics.
func (v *MarketValidator) Install(g *Gossip) error {
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

func (v *MarketValidator) validateOffer(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	o, res := v.checkOffer(ctx, msg.Data, false)
	if res == pubsub.ValidationAccept {
		msg.ValidatorData = o
	}
	return res
}

func (v *MarketValidator) validateBid(ctx context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	b, res := v.CheckBid(ctx, msg.Data)
	if res == pubsub.ValidationAccept {
		msg.ValidatorData = b
	}
	return res
}

// validateEvidence accepts evidence whose signed documents prove the
// offenders it names (attest.VerifyEvidence), passing them on in
// ValidatorData as []peer.ID, and rejects anything else: evidence that does
// not prove cheating is an attempt to frame someone.
func (v *MarketValidator) validateEvidence(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	offenders, err := attest.VerifyEvidence(msg.Data)
	if err != nil {
		v.Rejected.Add(1)
		v.log.Debug("rejected evidence", "from", from, "err", err)
		return pubsub.ValidationReject
	}
	msg.ValidatorData = offenders
	v.Accepted.Add(1)
	return pubsub.ValidationAccept
}

// CheckOffer runs the whole check on one offer envelope, however it came:
// signature, content at the local time, sequence. The offer is returned
// only with ValidationAccept. A gossiped offer needs a sequence number
// above any seen; one from book sync may equal it, so that a restarted
// node can take back what it held (its book lives in memory).
func (v *MarketValidator) CheckOffer(ctx context.Context, data []byte) (*pb.Offer, pubsub.ValidationResult) {
	return v.checkOffer(ctx, data, false)
}

// CheckSyncedOffer is CheckOffer for an envelope that came by book sync.
func (v *MarketValidator) CheckSyncedOffer(ctx context.Context, data []byte) (*pb.Offer, pubsub.ValidationResult) {
	return v.checkOffer(ctx, data, true)
}

func (v *MarketValidator) checkOffer(ctx context.Context, data []byte, synced bool) (*pb.Offer, pubsub.ValidationResult) {
	o, err := market.Open[*pb.Offer](data)
	if err == nil {
		err = v.limits.ValidateOffer(o, v.now())
	}
	if res := v.verdict(TopicOffers, o, err, synced); res != pubsub.ValidationAccept {
		return nil, res
	}
	return o, pubsub.ValidationAccept
}

// CheckBid is CheckOffer for bids.
func (v *MarketValidator) CheckBid(ctx context.Context, data []byte) (*pb.Bid, pubsub.ValidationResult) {
	b, err := market.Open[*pb.Bid](data)
	if err == nil {
		err = v.limits.ValidateBid(b, v.now())
	}
	if res := v.verdict(TopicBids, b, err, false); res != pubsub.ValidationAccept {
		return nil, res
	}
	return b, pubsub.ValidationAccept
}

// header is what verdict needs of an opened message.
type header interface{ GetHeader() *pb.Header }

func (v *MarketValidator) verdict(kind string, m header, err error, equalOK bool) pubsub.ValidationResult {
	switch {
	case errors.Is(err, market.ErrExpired) || errors.Is(err, market.ErrFuture):
		v.Ignored.Add(1)
		v.log.Debug("ignored market message", "topic", kind, "err", err)
		return pubsub.ValidationIgnore
	case err != nil:
		v.Rejected.Add(1)
		v.log.Debug("rejected market message", "topic", kind, "err", err)
		return pubsub.ValidationReject
	}
	h := m.GetHeader()
	if !v.seqs.Advance(kind, peer.ID(h.Issuer), h.Id, h.Seq, h.ExpiresUnixMs, equalOK) {
		v.Ignored.Add(1)
		v.log.Debug("ignored market message", "topic", kind, "issuer", peer.ID(h.Issuer), "id", h.Id, "seq", h.Seq, "why", "sequence not above the last seen")
		return pubsub.ValidationIgnore
	}
	v.Accepted.Add(1)
	return pubsub.ValidationAccept
}
