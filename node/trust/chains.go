package trust

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Complaints learned from chains: records that one party proposed in its
// chain and the other never completed (a renter's failure its provider
// did not sign, a provider's receipt its renter did not countersign),
// over the lease's term both signed. A provider cannot hide a lease it
// failed from whoever reads its renters' chains. They are kept in the
// learned receipts' cache, stored under complaintPrefix by the block's
// hash.
var complaintPrefix = ds.NewKey("/reputation/complaints")

// Bounds of reading chains when learning about a provider.
const (
	// chainPages is how many answers of a chain (p2p.MaxChainReply
	// blocks each) one reading takes at most.
	chainPages = 4
	// chainCounterparties is how many of a provider's counterparties'
	// chains one learning about it reads.
	chainCounterparties = 4
)

// entry is a block of a chain read, and whether the counterparty's
// completion of it came beside it.
type entry struct {
	b         *chain.Block
	completed bool
}

// readChain reads q's chain from its first block, at most chainPages
// answers, checked whole (chain.Verify): the blocks before the first
// fault it finds. A fault two of q's blocks prove is reported as
// evidence against q.
func (r *Reputation) readChain(ctx context.Context, q peer.ID) []entry {
	var signed []*pb.SignedBlock
	var links []*pb.SignedBlock
	for range chainPages {
		n, err := r.net.FetchChain(ctx, q, uint64(len(signed))+1, func(raw []byte) {
			e := new(pb.ChainEntry)
			if market.Unmarshal(raw, e) == nil && e.Block != nil {
				signed, links = append(signed, e.Block), append(links, e.Link)
			}
		})
		if err != nil {
			r.log.Debug("chain not read", "peer", q, "err", err)
		}
		if err != nil || n < p2p.MaxChainReply {
			break
		}
	}
	blocks, err := chain.Verify(q, r.swarm, 1, signed)
	if err != nil {
		r.log.Debug("chain refused", "peer", q, "err", err)
		var c *chain.Conflict
		if errors.As(err, &c) {
			r.reportConflict(ctx, c)
		}
	}
	out := make([]entry, len(blocks))
	for i, b := range blocks {
		out[i].b = b
		if links[i] != nil {
			l, err := chain.Open(links[i])
			out[i].completed = err == nil && (chain.Completes(l, b) || chain.Completes(b, l))
		}
	}
	return out
}

// reportConflict hands evidence of a conflict in a peer's chain on.
func (r *Reputation) reportConflict(ctx context.Context, c *chain.Conflict) {
	if r.report == nil {
		return
	}
	ev, err := attest.NewChainEvidence(c)
	if err == nil {
		err = r.report(ctx, ev)
	}
	if err != nil {
		r.log.Warn("chain evidence not reported", "peer", c.Owner, "err", err)
		return
	}
	r.log.Info("chain evidence reported", "peer", c.Owner, "kind", c.Kind.String())
}

// learnChains reads p's chain and the chains of up to
// chainCounterparties of the peers its chain shows it dealt with, latest
// first, and keeps the complaints of p they hold: its failures that its
// renters recorded and it never signed. It returns how many it did not
// hold.
func (r *Reputation) learnChains(ctx context.Context, p peer.ID) int {
	mine := r.readChain(ctx, p)
	var asked []peer.ID
	for i := len(mine) - 1; i >= 0 && len(asked) < chainCounterparties; i-- {
		if q := mine[i].b.Counterparty(); q != r.self && !slices.Contains(asked, q) {
			asked = append(asked, q)
		}
	}
	now := r.clock.Now()
	var fresh []learned
	for _, q := range asked {
		for _, e := range r.readChain(ctx, q) {
			if l, ok := complaintOf(e, p, r.self, now); ok {
				fresh = append(fresh, l)
			}
		}
	}
	return r.keep(ctx, fresh)
}

// complaintOf is e as a complaint of about: a proposal its counterparty
// (about) never completed, of a kind a complaint counts for, within its
// term and not after now. This node's own leases are not learned: its
// own records say what it saw.
func complaintOf(e entry, about, self peer.ID, now time.Time) (learned, bool) {
	b := e.b
	if e.completed || !b.Proposal() || b.Counterparty() != about || about == self || b.Owner() == self {
		return learned{}, false
	}
	if chain.CheckDates(b, now, receiptSkew) != nil {
		return learned{}, false
	}
	rc, ok := complaint(b)
	if !ok {
		return learned{}, false
	}
	raw, err := proto.Marshal(b.Signed)
	if err != nil {
		return learned{}, false
	}
	return learned{key: complaintPrefix.ChildString(hex.EncodeToString(b.Hash)), env: raw, rc: rc}, true
}

// complaint is what proposal b says for reputation as its owner's
// complaint: a renter's of a failed lease, a provider's of a receipt
// for time used that its renter did not countersign.
func complaint(b *chain.Block) (reputation.Receipt, bool) {
	rc := b.Receipt()
	out := counted(rc, false)
	out.Proposer = b.Owner()
	switch {
	case out.Proposer == out.Renter && rc.Outcome == pb.Outcome_OUTCOME_FAILED:
		out.Kind = reputation.ProviderFault
	case out.Proposer == out.Provider && rc.Outcome != pb.Outcome_OUTCOME_FAILED && rc.AmountMicros > 0:
		out.Kind = reputation.RenterFault
	default:
		return out, false
	}
	return out, true
}

// openComplaint reads a stored complaint, which was checked when it was
// learned.
func openComplaint(env []byte, self peer.ID, swarm string) (reputation.Receipt, error) {
	sb := new(pb.SignedBlock)
	if err := market.Unmarshal(env, sb); err != nil {
		return reputation.Receipt{}, err
	}
	b, err := chain.Open(sb)
	if err != nil {
		return reputation.Receipt{}, err
	}
	rc, ok := complaint(b)
	if !ok || b.Swarm != swarm || rc.Renter == self || rc.Provider == self {
		return reputation.Receipt{}, errNotForUs
	}
	return rc, nil
}
