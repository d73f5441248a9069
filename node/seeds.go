package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/internal/fanout"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Where a trust seed came from, as `idlegrid reputation` says it.
const (
	SeedConfigured = "reputation.seeds"
	SeedBootstrap  = "a bootstrap peer"
	SeedAllowList  = "the swarm's allow-list"
	SeedInherited  = "chosen by bootstrap peer "
)

// Bounds of inheriting seeds.
const (
	// maxInherited bounds the seeds taken from the bootstrap peers.
	maxInherited = 64
	// inheritEvery is how often the bootstrap peers are asked again;
	// inheritRetry how soon after a round that got nothing.
	inheritEvery = time.Hour
	inheritRetry = time.Minute
)

// seed is a trust seed and where this node got it.
type seed struct {
	id   peer.ID
	from string
}

// seedSet holds this node's trust seeds.
type seedSet struct {
	mu    sync.Mutex // guards seeds; held for no I/O
	seeds []seed
}

func (s *seedSet) set(seeds []seed) {
	s.mu.Lock()
	s.seeds = seeds
	s.mu.Unlock()
}

func (s *seedSet) get() []seed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seeds
}

// views are the seeds as the API shows them.
func (s *seedSet) views() []api.SeedView {
	var out []api.SeedView
	for _, sd := range s.get() {
		out = append(out, api.SeedView{Peer: sd.id.String(), From: sd.from})
	}
	return out
}

// ids are the seeds' peer IDs.
func (s *seedSet) ids() []peer.ID {
	var out []peer.ID
	for _, sd := range s.get() {
		out = append(out, sd.id)
	}
	return out
}

// addSeed appends p, from from, to seeds unless it is there.
func addSeed(seeds []seed, p peer.ID, from string) []seed {
	if slices.ContainsFunc(seeds, func(s seed) bool { return s.id == p }) {
		return seeds
	}
	return append(seeds, seed{p, from})
}

// configuredSeeds are the seeds reputation.seeds names: what this node
// serves to peers that ask for the seeds its operator chose.
func (n *Node) configuredSeeds() []peer.ID {
	var seeds []peer.ID
	for _, s := range n.cfg.Reputation.Seeds {
		if p, err := peer.Decode(s); err == nil { // Validate checked them
			seeds = append(seeds, p)
		}
	}
	return seeds
}

// baseSeeds are the peers whose view of the swarm this node adopts in its
// reputation scores before it asks anyone: reputation.seeds, else its
// bootstrap peers and, in a private swarm, its allow-list.
func (n *Node) baseSeeds() []seed {
	var out []seed
	for _, p := range n.configuredSeeds() {
		out = addSeed(out, p, SeedConfigured)
	}
	if len(out) > 0 {
		return out
	}
	for _, ai := range n.bootstrap {
		out = addSeed(out, ai.ID, SeedBootstrap)
	}
	for _, p := range n.allow {
		out = addSeed(out, p, SeedAllowList)
	}
	return out
}

// inheritSeeds runs until ctx ends: a node whose operator chose no seeds
// adopts, beside its bootstrap peers, the seeds their operators chose
// (SeedsProtocol), asking again every inheritEvery. A bootstrap peer
// leases nothing, so trust that starts from it alone reaches no one and
// every provider ties at the prior; the peers its operator trusts have
// history. At most maxInherited are taken, a seed named by several
// bootstrap peers once.
func (n *Node) inheritSeeds(ctx context.Context) {
	if len(n.configuredSeeds()) > 0 || len(n.bootstrap) == 0 {
		return
	}
	for {
		wait := inheritEvery
		if !n.askSeeds(ctx) {
			wait = inheritRetry
		}
		select {
		case <-n.clock.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// askSeeds asks every bootstrap peer for its seeds and adopts them; it
// reports whether any answered.
func (n *Node) askSeeds(ctx context.Context) bool {
	var mu sync.Mutex
	got := map[peer.ID][]peer.ID{}
	ids := make([]peer.ID, len(n.bootstrap))
	for i, ai := range n.bootstrap {
		ids[i] = ai.ID
	}
	answered := fanout.Any(ctx, p2p.SeedsDeadline, ids, func(ctx context.Context, b peer.ID) bool {
		seeds, err := p2p.FetchSeeds(ctx, n.host, n.swarm, b)
		if err != nil {
			n.log.Debug("seeds not fetched", "peer", b, "err", err)
			return false
		}
		mu.Lock()
		got[b] = seeds
		mu.Unlock()
		return true
	})
	if !answered {
		return false
	}
	seeds := n.baseSeeds()
	most := len(seeds) + maxInherited
	for _, b := range ids {
		for _, p := range got[b] {
			if len(seeds) == most {
				break
			}
			if p != n.id {
				seeds = addSeed(seeds, p, SeedInherited+b.String())
			}
		}
	}
	n.seeds.set(seeds)
	n.reputation.SetSeeds(n.seeds.ids())
	return true
}
