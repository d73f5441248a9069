package p2p

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Bound is the most peers a node holds connections to, and the grace
// period of its connection manager.
//
// The connection manager alone bounds softly: it trims only connections
// older than the grace period, at most once per silence period. A node
// that many others find near (the centre of a dense region, in a swarm
// that dials nearest first) gets new connections faster than they age,
// and on a 1,000-node swarm one held 196 at a high-water mark of 64. A
// bounder holds the mark hard: whenever a new connection takes the node
// past High, it has the connection manager trim at once (down to its low
// mark, of the peers past their grace period), and if young connections
// alone still hold the node past High, it closes the least valued of
// those too (evictionOrder); never a peer the Keeper protects. A newcomer
// is admitted, not refused, and goes last among the peers of its value: a
// renter that dials a provider holding its full set still reaches it.
type Bound struct {
	High  int           // 0: no hard bound, the connection manager's only
	Grace time.Duration // among peers of equal value, the younger than this go last
}

// bounder closes the surplus peers of a host past its Bound.
type bounder struct {
	h     host.Host
	cm    connmgr.ConnManager
	b     Bound
	kick  chan struct{}
	done  chan struct{}
	close sync.Once

	// conns counts each connected peer's connections, from the network's
	// notifications: the count of peers the loop is woken by, in O(1)
	// where the network's Peers is a slice of them all (a bootstrap node
	// holds thousands, and each new connection would copy them under the
	// network's notification lock).
	mu    sync.Mutex
	conns map[peer.ID]int

	evicted atomic.Uint64 // connections evict closed
}

// newBounder bounds h, which must not have connected yet: the bounder
// counts the connections it is told of.
func newBounder(h host.Host, cm connmgr.ConnManager, b Bound) *bounder {
	bd := &bounder{h: h, cm: cm, b: b, kick: make(chan struct{}, 1), done: make(chan struct{}), conns: map[peer.ID]int{}}
	h.Network().Notify(bd)
	go bd.loop()
	return bd
}

func (bd *bounder) loop() {
	for {
		select {
		case <-bd.done:
			return
		case <-bd.kick:
			if bd.peers() > bd.b.High {
				bd.cm.TrimOpenConns(context.Background())
				bd.evict(time.Now())
			}
		}
	}
}

func (bd *bounder) stop() {
	bd.close.Do(func() {
		bd.h.Network().StopNotify(bd)
		close(bd.done)
	})
}

// evict closes peers until at most High remain, in evictionOrder; never
// one a Keeper or a kept shard protects.
func (bd *bounder) evict(now time.Time) {
	peers := bd.h.Network().Peers()
	over := len(peers) - bd.b.High
	if over <= 0 {
		return
	}
	var cs []candidate
	for _, p := range peers {
		if keeperProtected(bd.cm, p) {
			continue
		}
		c := candidate{p: p, firstAt: now}
		if info := bd.cm.GetTagInfo(p); info != nil {
			c.value, c.firstAt = info.Value, info.FirstSeen
		}
		cs = append(cs, c)
	}
	for _, c := range evictionOrder(cs, now, bd.b.Grace)[:min(over, len(cs))] {
		bd.evicted.Add(1)
		bd.h.Network().ClosePeer(c.p)
	}
}

// BoundEvictions is how many peers the hard bound of h (a host from
// NewHost or BoundHost, or one that wraps such a host and says so by an
// Unwrap method) has closed: the least valued, each when a new
// connection took h past its high-water mark. 0 for a host without one.
func BoundEvictions(h host.Host) uint64 {
	for h != nil {
		switch x := h.(type) {
		case *boundHost:
			if x.bd == nil {
				return 0
			}
			return x.bd.evicted.Load()
		case interface{ Unwrap() host.Host }:
			h = x.Unwrap()
		default:
			return 0
		}
	}
	return 0
}

// candidate is a peer a bounder may close: its connection manager tags'
// value and when the connection manager first saw it.
type candidate struct {
	p       peer.ID
	value   int
	firstAt time.Time
}

// evictionOrder sorts cs in the order a bounder closes them: the least
// valued first (an untagged peer before a gossip mesh peer), and among
// equals those past their grace period at now before those still in it,
// the oldest first.
func evictionOrder(cs []candidate, now time.Time, grace time.Duration) []candidate {
	young := func(c candidate) int {
		if now.Sub(c.firstAt) < grace {
			return 1
		}
		return 0
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.value, b.value), cmp.Compare(young(a), young(b)), a.firstAt.Compare(b.firstAt))
	})
	return cs
}

// peers is how many peers the host holds connections to, as the
// notifications have told.
func (bd *bounder) peers() int {
	bd.mu.Lock()
	defer bd.mu.Unlock()
	return len(bd.conns)
}

// Connected counts c and, past High, asks the loop to look: the
// notification runs under the swarm's lock, where closing a connection
// must not. A network notifies a connection's Connected before its
// Disconnected.
func (bd *bounder) Connected(_ network.Network, c network.Conn) {
	bd.mu.Lock()
	bd.conns[c.RemotePeer()]++
	over := len(bd.conns) > bd.b.High
	bd.mu.Unlock()
	if over {
		select {
		case bd.kick <- struct{}{}:
		default:
		}
	}
}

func (bd *bounder) Disconnected(_ network.Network, c network.Conn) {
	bd.mu.Lock()
	defer bd.mu.Unlock()
	p := c.RemotePeer()
	if bd.conns[p] <= 1 {
		delete(bd.conns, p)
		return
	}
	bd.conns[p]--
}
func (bd *bounder) Listen(network.Network, ma.Multiaddr)      {}
func (bd *bounder) ListenClose(network.Network, ma.Multiaddr) {}

// keeperProtected says whether a Keeper's tag or a kept shard's protects
// p: the only protection a keeperConnMgr passes on to the connection
// manager it wraps.
func keeperProtected(cm connmgr.ConnManager, p peer.ID) bool {
	if k, ok := cm.(keeperConnMgr); ok {
		return k.ConnManager.IsProtected(p, "")
	}
	return cm.IsProtected(p, "")
}
