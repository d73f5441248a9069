package book

import (
	"context"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/ipfs/go-datastore/query"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// resyncInterval is the longest wait between syncs with one random peer,
// which make books converge even when a gossiped offer was missed; the
// first come sooner (5 s, doubling).
const resyncInterval = 2 * time.Minute

// A node syncs with the first joinSyncBurst peers that join the offers
// topic, then with at most one more per joinSyncEvery: a whole book per
// joining peer would not scale to a swarm of thousands, and the periodic
// resync catches anything the gossip missed.
const (
	joinSyncBurst = 3
	joinSyncEvery = 10 * time.Second
	// syncsAtOnce bounds the book fetches in flight.
	syncsAtOnce = 4
	// rejoinSync is how long a peer's book sync stands: a peer that
	// disconnects and joins again within it is not synced again. A
	// bounded node closes and takes back peers all the time (its bound,
	// the DHT's dials): at 200 nodes, syncing each on its return cost
	// 4.9 syncs a node a minute, ten times the resync's pace, where what
	// it could have missed meanwhile came by gossip from its other peers.
	rejoinSync = 10 * time.Minute
	// maxSyncedKept bounds the peers syncBooks remembers: keys and
	// connections cost an attacker nothing. Past it a peer's return may
	// be synced again, within the join budget.
	maxSyncedKept = 4096
)

// feedJoins sends out the peers that join a topic (the offers topic, or
// an offers shard), until ctx ends.
func feedJoins(ctx context.Context, h *pubsub.TopicEventHandler, out chan<- peer.ID, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer h.Cancel()
		for {
			ev, err := h.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type != pubsub.PeerJoin {
				continue
			}
			select {
			case out <- ev.Peer:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// Disconnects sends out the peers h loses its last connection to, for
// Market.Start's gone (a peer is synced again when it joins again),
// until stop. A peer it cannot hand over at once it drops: the periodic
// resync covers it.
func Disconnects(h host.Host) (gone <-chan peer.ID, stop func()) {
	out := make(chan peer.ID, 256)
	notify := &network.NotifyBundle{DisconnectedF: func(net network.Network, c network.Conn) {
		if net.Connectedness(c.RemotePeer()) != network.Connected {
			select {
			case out <- c.RemotePeer():
			default:
			}
		}
	}}
	h.Network().Notify(notify)
	return out, func() { h.Network().StopNotify(notify) }
}

// syncBooks fetches the book of every peer that joins the offers topic
// (it is subscribed then, so what is published later reaches it by
// gossip), and of one random peer now and then, checking each offer as
// if it were gossiped. It alone keeps whom it synced, and when: a peer
// that disconnects (gone) is synced again when it joins again, once
// rejoinSync has passed since its last sync. A peer the join budget
// passes over counts as synced.
func (m *Market) syncBooks(ctx context.Context, joins, gone <-chan peer.ID) {
	defer m.wg.Done()
	synced := map[peer.ID]time.Time{} // when each peer joined, for rejoinSync
	sem := make(chan struct{}, syncsAtOnce)
	budget := syncBudget{burst: joinSyncBurst, every: joinSyncEvery}
	wait := 5 * time.Second
	timer := m.clock.NewTimer(wait)
	defer timer.Stop()
	for {
		var p peer.ID
		select {
		case <-ctx.Done():
			return
		case p = <-gone:
			if at, ok := synced[p]; ok && m.clock.Since(at) >= rejoinSync {
				delete(synced, p)
			}
			continue
		case <-timer.C():
			wait = min(2*wait, resyncInterval)
			timer.Reset(wait)
			for q, at := range synced { // a join is not seen again but after a disconnection
				if m.clock.Since(at) >= rejoinSync {
					delete(synced, q)
				}
			}
			if peers := m.Net.SyncPeers(); len(peers) > 0 {
				p = peers[0]
			} else {
				continue
			}
		case p = <-joins:
			now := m.clock.Now()
			if at, ok := synced[p]; ok && now.Sub(at) < rejoinSync {
				continue
			}
			if len(synced) < maxSyncedKept {
				synced[p] = now
			}
			if !budget.allow(now) {
				continue
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer func() { <-sem }()
			m.FetchBook(ctx, p)
		}()
	}
}

// FetchBook syncs p's book, of the shards the market follows, each offer
// checked as a gossiped one is, and the evidence p recorded, each piece
// checked again.
func (m *Market) FetchBook(ctx context.Context, p peer.ID) {
	m.fetchShards(ctx, p, m.Followed())
}

// fetchShards is FetchBook of some shards (nil: every one).
func (m *Market) fetchShards(ctx context.Context, p peer.ID, shards []string) {
	held := m.Snapshot() // one for the whole sync: a snapshot per offer would rebuild the book's indexes each time
	got, err := m.Net.FetchShards(ctx, p, shards, m.Digest(ctx), func(env []byte) {
		if !alreadyHeld(held, env) {
			m.synced(ctx, p, env)
		}
	})
	if err != nil {
		m.log.Debug("book sync failed", "peer", p, "err", err)
		return
	}
	m.log.Debug("book synced", "peer", p, "offers", got)
	m.booksSynced.Add(1)
	var evidence [][]byte
	if _, err := m.Net.FetchEvidence(ctx, p, func(ev []byte) { evidence = append(evidence, ev) }); err != nil {
		m.log.Debug("evidence sync failed", "peer", p, "err", err)
	}
	for _, ev := range evidence {
		if offenders, err := m.Validator.CheckEvidence(ev); err == nil {
			m.RecordOffenders(ctx, offenders, ev)
		}
	}
}

// Digest is what this node holds, as a book sync's asker sends it: the
// offers whose envelopes it holds (and would serve), each at its
// sequence number, at most p2p.MaxSyncOffers of them.
func (m *Market) Digest(ctx context.Context) *p2p.BookDigest {
	d := new(p2p.BookDigest)
	m.Do(ctx, func(st *State) {
		for k, h := range st.envelopes {
			d.Add(k.issuer, k.id, h.seq)
		}
	})
	return d
}

// evidenceHeld is what evidence sync serves: the evidence recorded
// against each offender, each piece once.
func (m *Market) evidenceHeld(ctx context.Context) ([][]byte, error) {
	res, err := m.store.Query(ctx, query.Query{Prefix: evidencePrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	seen := map[string]bool{}
	var out [][]byte
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		if !seen[string(e.Value)] {
			seen[string(e.Value)] = true
			out = append(out, e.Value)
		}
	}
	return out, nil
}

// synced admits an envelope that came by book sync from p, within the
// budgets a gossiped one spends (its issuer's, the strangers' share of p),
// checks it and delivers it: a sync is one more way in, not a way around.
func (m *Market) synced(ctx context.Context, p peer.ID, env []byte) {
	if o, res := m.Validator.SyncedOffer(ctx, p, env); res == pubsub.ValidationAccept {
		m.offer(ctx, o, env)
	}
}

// alreadyHeld says whether the book held the offer env claims, at that
// sequence number or a later one. A sync answers mostly with what the
// node holds already, and that changes nothing, so it is dropped unread
// and costs no budget: were it charged, every resync of a neighbour's book
// would spend the strangers' budget on copies, and new offers gossiped
// meanwhile would be refused.
// The claim is unverified, which is enough to drop it: a verified stale
// offer is dropped as well.
func alreadyHeld(held *market.Snapshot, env []byte) bool {
	issuer, id, seq, ok := market.ClaimedOffer(env)
	if !ok {
		return false
	}
	have, ok := held.Seq(issuer, id)
	return ok && have >= seq
}

// syncBudget is a token bucket for join-triggered syncs; only the
// syncBooks goroutine uses it.
type syncBudget struct {
	burst  int
	every  time.Duration
	tokens int
	last   time.Time
	primed bool
}

func (b *syncBudget) allow(now time.Time) bool {
	if !b.primed {
		b.tokens, b.last, b.primed = b.burst, now, true
	}
	if gained := int(now.Sub(b.last) / b.every); gained > 0 {
		b.tokens, b.last = min(b.burst, b.tokens+gained), b.last.Add(time.Duration(gained)*b.every)
	}
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}
