package node

import (
	"context"
	"time"

	"github.com/idlegrid/idlegrid/internal/fanout"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// measureWait bounds how long a rental waits to measure its best
// candidates' RTTs: a lookup, a dial, three pings and a coordinate.
const measureWait = 2 * time.Second

// measure locates and pings, in parallel and within measureWait, the
// providers among ps the pinger has no sample of; it reports whether it
// took any. (A peer's only RTT may be the peerstore's EWMA of the ping
// that confirmed its connection, taken while a fresh node starts: that
// one is not trusted to rank by.) The samples settle its coordinate too.
func (n *Node) measure(ctx context.Context, ps []peer.ID) bool {
	pinger := n.pinger
	if pinger == nil { // before the node's ping step started
		return false
	}
	return fanout.Any(ctx, measureWait, ps, func(ctx context.Context, p peer.ID) bool {
		if _, ok := n.coords.RTT(p); ok || n.link.Locate(ctx, p) != nil {
			return false
		}
		pinger.Sample(ctx, p)
		_, ok := n.coords.RTT(p)
		return ok
	})
}

// coordKey is where a node keeps its network coordinate between runs, so
// that a restarted provider's offer carries a settled one at once.
var coordKey = ds.NewKey("/locality/coordinate")

// loadCoordinate takes up the coordinate a previous run kept; one that
// does not decode or check is dropped, and the node starts at the origin.
func (n *Node) loadCoordinate() {
	b, err := n.store.Get(context.Background(), coordKey)
	if err != nil {
		return
	}
	c := new(pb.NetworkCoordinate)
	if err = proto.Unmarshal(b, c); err == nil {
		err = n.coords.SetOwn(c)
	}
	if err != nil {
		n.log.Warn("kept network coordinate dropped", "err", err)
		n.store.Delete(context.Background(), coordKey)
	}
}

// saveCoordinate keeps the node's coordinate for its next run.
func (n *Node) saveCoordinate() {
	b, err := proto.Marshal(p2p.CoordToProto(n.coords.Own()))
	if err == nil {
		err = n.store.Put(context.Background(), coordKey, b)
	}
	if err != nil {
		n.log.Warn("network coordinate not kept", "err", err)
	}
}

// coordSaveEvery is how often a running node keeps its coordinate.
const coordSaveEvery = 10 * time.Minute

// keepNear has the keeper choose again, after every ping interval, the
// peers the connection manager never trims (network.near_peers of least
// measured RTT and network.random_peers at random), until ctx ends. It
// keeps the pinger's pace, on the network's clock.
func (n *Node) keepNear(ctx context.Context) {
	tick := time.NewTicker(n.cfg.Network.PingInterval.Std())
	defer tick.Stop()
	saved := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.keeper.Refresh()
		if time.Since(saved) >= coordSaveEvery { // a crash loses at most this much
			n.saveCoordinate()
			saved = time.Now()
		}
	}
}

// isNear reports whether p is protected as one of the nearest peers.
func (n *Node) isNear(p peer.ID) bool { return n.keeper != nil && n.keeper.Near(p) }

// rtts is the node's RTT source for the matcher and its views.
func (n *Node) rtts() swarm.RTTs { return swarm.NewRTTs(n.host, n.coords, n.place) }
