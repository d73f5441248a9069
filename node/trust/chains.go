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
	// chainRecent is how many of a provider's newest blocks one
	// learning about it reads, for the counterparties it dealt with last.
	chainRecent = 16
	// chainPages is how many answers (p2p.MaxChainReply blocks each) of
	// a counterparty's blocks of leases with the provider one learning
	// reads at most.
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

// readRecent reads q's newest chainRecent blocks, checked as one run of
// its chain (chain.Verify): the blocks before the first fault it finds.
// A fault two of q's blocks prove is reported as evidence against q.
func (r *Reputation) readRecent(ctx context.Context, q peer.ID) []entry {
	var signed, links []*pb.SignedBlock
	_, err := r.net.FetchChain(ctx, q, p2p.ChainQuery{Want: chainRecent}, func(raw []byte) {
		if e := new(pb.ChainEntry); market.Unmarshal(raw, e) == nil && e.Block != nil {
			signed, links = append(signed, e.Block), append(links, e.Link)
		}
	})
	if err != nil {
		r.log.Debug("chain not read", "peer", q, "err", err)
	}
	if len(signed) == 0 {
		return nil
	}
	first, err := chain.Open(signed[0])
	if err != nil {
		return nil
	}
	blocks, err := chain.Verify(q, r.swarm, first.Seq, signed)
	if err != nil {
		r.log.Debug("chain refused", "peer", q, "err", err)
		var c *chain.Conflict
		if errors.As(err, &c) {
			r.reportConflict(ctx, c)
		}
	}
	out := make([]entry, len(blocks))
	for i, b := range blocks {
		out[i] = entry{b: b, completed: completedBy(b, links[i])}
	}
	return out
}

// readAbout reads q's blocks of leases with p, at most chainPages
// answers, each block checked on its own (q's, of this swarm, with p)
// and against the others read: two of them that prove q rewrote its
// chain (a fork, a broken link between neighbours, two records of one
// lease) are reported as evidence against q, and nothing of q's is
// learned.
func (r *Reputation) readAbout(ctx context.Context, q, p peer.ID) []entry {
	var out []entry
	bySeq, byLease := map[uint64]*chain.Block{}, map[string]*chain.Block{}
	var found *chain.Conflict
	from := uint64(1)
	for range chainPages {
		n, err := r.net.FetchChain(ctx, q, p2p.ChainQuery{From: from, About: p}, func(raw []byte) {
			e := new(pb.ChainEntry)
			if found != nil || market.Unmarshal(raw, e) != nil || e.Block == nil {
				return
			}
			b, err := chain.Open(e.Block)
			if err != nil || b.Owner() != q || b.Swarm != r.swarm || b.Counterparty() != p {
				return
			}
			rc := b.Receipt()
			lease := rc.LeaseId + "\x00" + string(rc.LeaseHash)
			for _, other := range []*chain.Block{bySeq[b.Seq], bySeq[b.Seq-1], bySeq[b.Seq+1], byLease[lease]} {
				if other != nil && found == nil {
					found = chain.Against(other, b)
				}
			}
			bySeq[b.Seq], byLease[lease] = b, b
			out, from = append(out, entry{b: b, completed: completedBy(b, e.Link)}), max(from, b.Seq+1)
		})
		if err != nil {
			r.log.Debug("chain not read", "peer", q, "about", p, "err", err)
		}
		if found != nil {
			r.reportConflict(ctx, found)
			return nil
		}
		if err != nil || n < p2p.MaxChainReply {
			break
		}
	}
	return out
}

// completedBy reports whether link, the block served beside b, completes
// it or is the proposal b completes.
func completedBy(b *chain.Block, link *pb.SignedBlock) bool {
	if link == nil {
		return false
	}
	l, err := chain.Open(link)
	return err == nil && (chain.Completes(l, b) || chain.Completes(b, l))
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

// learnChains reads p's newest blocks and, in the chains of up to
// chainCounterparties of the peers they show it dealt with, latest
// first, the blocks of leases with p, and keeps the complaints of p they
// hold: its failures that its renters recorded and it never signed. It
// returns how many it did not hold.
func (r *Reputation) learnChains(ctx context.Context, p peer.ID) int {
	mine := r.readRecent(ctx, p)
	var asked []peer.ID
	for i := len(mine) - 1; i >= 0 && len(asked) < chainCounterparties; i-- {
		if q := mine[i].b.Counterparty(); q != r.self && !slices.Contains(asked, q) {
			asked = append(asked, q)
		}
	}
	now := r.clock.Now()
	var fresh []learned
	for _, q := range asked {
		for _, e := range r.readAbout(ctx, q, p) {
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
