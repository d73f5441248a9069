package p2p

import (
	"cmp"
	"context"
	"slices"
	"sync"
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
}

func newBounder(h host.Host, cm connmgr.ConnManager, b Bound) *bounder {
	bd := &bounder{h: h, cm: cm, b: b, kick: make(chan struct{}, 1), done: make(chan struct{})}
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
			if len(bd.h.Network().Peers()) > bd.b.High {
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
		bd.h.Network().ClosePeer(c.p)
	}
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

// Connected asks the loop to look at the count: the notification runs
// under the swarm's lock, where closing a connection must not.
func (bd *bounder) Connected(_ network.Network, c network.Conn) {
	if len(bd.h.Network().Peers()) > bd.b.High {
		select {
		case bd.kick <- struct{}{}:
		default:
		}
	}
}

func (bd *bounder) Disconnected(network.Network, network.Conn) {}
func (bd *bounder) Listen(network.Network, ma.Multiaddr)       {}
func (bd *bounder) ListenClose(network.Network, ma.Multiaddr)  {}

// keeperProtected says whether a Keeper's tag or a kept shard's protects
// p: the only protection a keeperConnMgr passes on to the connection
// manager it wraps.
func keeperProtected(cm connmgr.ConnManager, p peer.ID) bool {
	if k, ok := cm.(keeperConnMgr); ok {
		return k.ConnManager.IsProtected(p, "")
	}
	return cm.IsProtected(p, "")
}
