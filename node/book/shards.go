package book

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// shards is what a market follows of the offers and bids topics: every
// shard (the kinds' own topics, as a node of the last version does), or
// the shards named, each subscribed to on both sharded kinds.
type shards struct {
	all bool

	// mu is held across joins and subscriptions, which wait for the
	// router's loop: nothing the loop calls (validators, admission) may
	// take it.
	mu       sync.Mutex
	followed []string // sorted
	g        *p2p.Gossip
	start    func(kind string, sub *pubsub.Subscription, events *pubsub.TopicEventHandler)
	keep     func(shard string) error // nil: no one keeps followers connected
}

// Follows says whether the market hears a shard's offers and bids live:
// every one when it follows every shard.
func (m *Market) Follows(shard string) bool {
	if m.shards.all {
		return true
	}
	m.shards.mu.Lock()
	defer m.shards.mu.Unlock()
	_, found := slices.BinarySearch(m.shards.followed, shard)
	return found
}

// Followed are the shards the market follows, sorted; nil when it
// follows every one.
func (m *Market) Followed() []string {
	if m.shards.all {
		return nil
	}
	m.shards.mu.Lock()
	defer m.shards.mu.Unlock()
	return slices.Clone(m.shards.followed)
}

// Follow subscribes the market to more shards, a provider's own GPUs'
// families for one; none of that when it follows every shard already.
// Before Start it only records them. It refuses a shard past
// p2p.MaxShards.
func (m *Market) Follow(names ...string) error {
	if m.shards.all {
		return nil
	}
	m.shards.mu.Lock()
	defer m.shards.mu.Unlock()
	for _, sh := range names {
		if _, found := slices.BinarySearch(m.shards.followed, sh); found {
			continue
		}
		if err := p2p.ValidateShard(sh); err != nil {
			return err
		}
		if len(m.shards.followed) >= p2p.MaxShards {
			return fmt.Errorf("follow shard %s: this node follows %d shards, the most it may", sh, p2p.MaxShards)
		}
		if m.shards.g != nil {
			if err := m.subscribeShard(sh); err != nil {
				return err
			}
		}
		i, _ := slices.BinarySearch(m.shards.followed, sh)
		m.shards.followed = slices.Insert(m.shards.followed, i, sh)
	}
	return nil
}

// subscribeShard joins and subscribes to a shard on both sharded kinds;
// shards.mu is held, and Start has run.
func (m *Market) subscribeShard(sh string) error {
	for _, kind := range p2p.ShardedKinds {
		t, err := m.shards.g.JoinShard(kind, sh)
		if err != nil {
			return err
		}
		sub, err := t.Subscribe(pubsub.WithBufferSize(topicBuffer))
		if err != nil {
			return fmt.Errorf("subscribe %s shard %s: %w", kind, sh, err)
		}
		var events *pubsub.TopicEventHandler
		if kind == p2p.TopicOffers {
			if events, err = t.EventHandler(); err != nil {
				sub.Cancel()
				return fmt.Errorf("%s shard %s events: %w", kind, sh, err)
			}
		}
		m.shards.start(kind, sub, events)
	}
	if m.shards.keep != nil {
		if err := m.shards.keep(sh); err != nil {
			m.log.Warn("followers of a shard not kept connected", "shard", sh, "err", err)
		}
	}
	return nil
}

// Want fetches, from up to n peers, the offers of the shards of names
// that the market does not follow, in the background: a renter whose bid
// names a family this node does not follow, or a view of the book
// filtered by one, asks for them. Those peers are the shards' followers
// this node knows, then any it can sync with. It returns how many syncs
// it began; each adds to Synced when it completes. done, if not nil, is
// called as each ends.
func (m *Market) Want(ctx context.Context, names []string, n int, use func() (done func(), err error)) int {
	var missing []string
	for _, sh := range names {
		if !m.Follows(sh) && !slices.Contains(missing, sh) {
			missing = append(missing, sh)
		}
	}
	if len(missing) == 0 || n <= 0 {
		return 0
	}
	missing = missing[:min(len(missing), p2p.MaxShards)]
	var peers []peer.ID
	seen := map[peer.ID]bool{}
	if m.shards.g != nil {
		for _, sh := range missing {
			for _, p := range m.shards.g.ShardPeers(p2p.TopicOffers, sh) {
				if !seen[p] {
					seen[p] = true
					peers = append(peers, p)
				}
			}
		}
	}
	for _, p := range m.Net.SyncPeers() {
		if !seen[p] {
			seen[p] = true
			peers = append(peers, p)
		}
	}
	began := 0
	for _, p := range peers[:min(len(peers), n)] {
		done, err := use()
		if err != nil {
			break
		}
		began++
		go func() {
			defer done()
			m.fetchShards(ctx, p, missing)
		}()
	}
	return began
}
