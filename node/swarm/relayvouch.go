package swarm

import (
	"sync/atomic"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/libp2p/go-libp2p/core/peer"
)

// RelayVouch decides whom this node's relay reserves a slot for
// (p2p.NATConfig.Vouch). A reservation holds one of a bounded pool of
// slots for an hour and a fresh key costs nothing, so serving the swarm's
// protocols is not enough: a peer must have proved something that cost
// it. Its offer is in this node's book (it passed the book's per-issuer
// and strangers' budgets, and a provider behind a NAT publishes one
// before it needs the relay), or trust reaches it over co-signed
// receipts (leases it took part in). The host asks from its first
// connection and the book is built after it, so the sources arrive by
// set; until then the relay vouches for no one.
type RelayVouch struct {
	src atomic.Pointer[vouchSources]
}

type vouchSources struct {
	book   func() *market.Snapshot
	scores func() *reputation.Scores
}

// Set gives the vouch its sources; either may be nil.
func (v *RelayVouch) Set(book func() *market.Snapshot, scores func() *reputation.Scores) {
	v.src.Store(&vouchSources{book: book, scores: scores})
}

// Allows reports whether the relay may reserve a slot for p. It reads an
// immutable snapshot and the current scores: no I/O, no lock.
func (v *RelayVouch) Allows(p peer.ID) bool {
	s := v.src.Load()
	if s == nil {
		return false
	}
	if s.book != nil {
		if snap := s.book(); snap != nil {
			if _, ok := snap.Seq(p, offer.ProviderOfferID); ok {
				return true
			}
		}
	}
	if s.scores != nil {
		if sc := s.scores(); sc != nil && sc.Of(p).Trust > 0 {
			return true
		}
	}
	return false
}
