package p2p_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The router forgets a connected peer's subscriptions when its own
// stream to the peer dies, and does not learn them again while the
// peer's stream to it lives: here node 0's stream to node 1 is reset (as
// a write that timed out, or the close of a second connection that
// carried it, would end it). Node 0 must have node 1 back on the offers
// topic, by reconnecting to it. Node 1 holds a stream of the swarm's own
// protocols open at first, which keeps the connection up, whatever the
// wait, until node 1 closes it. Over QUIC and TCP.
func TestGossipHasAgainAPeerItsRouterForgotWhileConnected(t *testing.T) {
	for _, tc := range gossipTransports(t) {
		t.Run(tc.name, func(t *testing.T) {
			f := newForgetting(t, tc.opts)
			a, b := f.a, f.b
			hold := f.s.Swarm().Protocol("/idlegrid/subwatch-hold/1.0.0")
			b.Host.SetStreamHandler(hold, func(st network.Stream) {})
			held, err := a.Host.NewStream(f.ctx, b.Host.ID(), hold)
			if err != nil {
				t.Fatal(err)
			}
			old := a.Host.Network().ConnsToPeer(b.Host.ID())

			if n := resetRouterStreams(a, b.Host.ID()); n != 1 {
				t.Fatalf("node 0 had %d router streams to node 1, want 1", n)
			}
			f.waitFor("node 0's router drops node 1's subscriptions", func() bool { return !f.knows(a, b, f.offers) })
			f.waitFor("the watch finds node 1 missing", func() bool { return a.Gossip.RouterRepairs().Missing == 1 })
			// Due, and waited for twice: the held stream keeps the
			// connection.
			f.waitFor("the repair waits for the held stream", func() bool { return a.Gossip.RouterRepairs().Waited >= 2 })
			if r := a.Gossip.RouterRepairs(); r.Reconnected != 0 || f.knows(a, b, f.offers) {
				t.Fatalf("with a stream held: %+v, node 0 knows node 1: %v; want it left alone and still forgotten", r, f.knows(a, b, f.offers))
			}
			for _, c := range old {
				if c.IsClosed() {
					t.Fatalf("connection %s closed while a stream of the swarm's own was open on it", c.RemoteMultiaddr())
				}
			}
			if _, err := held.Write([]byte("still here")); err != nil {
				t.Fatalf("the held stream: %v", err)
			}

			held.Close()
			f.waitRepaired(old, f.offers)
		})
	}
}

// The router's new stream to the peer dies too, and then the peer
// subscribes to one more topic: neither is the peer's hello, and node 0
// must still have node 1 back on the offers topic. Over QUIC and TCP.
func TestGossipHasAgainAPeerForgottenTwiceThatSubscribedSince(t *testing.T) {
	for _, tc := range gossipTransports(t) {
		t.Run(tc.name, func(t *testing.T) {
			f := newForgetting(t, tc.opts)
			a, b := f.a, f.b
			old := a.Host.Network().ConnsToPeer(b.Host.ID())
			for i := range 2 {
				f.waitFor("node 0's router has a stream to node 1", func() bool { return routerStreams(a, b.Host.ID()) == 1 })
				if n := resetRouterStreams(a, b.Host.ID()); n != 1 {
					t.Fatalf("reset %d: node 0 had %d router streams to node 1, want 1", i, n)
				}
				f.waitFor("node 0's router drops node 1's subscriptions", func() bool { return !f.knows(a, b, f.offers) })
			}
			shard, err := b.Gossip.JoinShard(p2p.TopicOffers, p2p.ShardAny)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := shard.Subscribe()
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Cancel()
			f.waitFor("node 0's router hears node 1 follow the shard", func() bool { return f.knows(a, b, shard.String()) })
			if f.knows(a, b, f.offers) {
				t.Fatal("node 0's router had node 1 back on offers without a hello: the reset did not take")
			}
			f.waitRepaired(old, f.offers, shard.String())
		})
	}
}

// forgetting is a pair of loopback nodes whose routers hear each other.
type forgetting struct {
	t      *testing.T
	ctx    context.Context
	s      *p2ptest.Swarm
	a, b   *p2ptest.Node
	offers string
}

func newForgetting(t *testing.T, opts []p2ptest.Option) *forgetting {
	s := p2ptest.NewLoopback(t, 2, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &forgetting{t: t, ctx: ctx, s: s, a: s.Nodes[0], b: s.Nodes[1], offers: s.Swarm().Topic(p2p.TopicOffers)}
	f.waitFor("the two routers hear each other", func() bool { return f.knows(f.a, f.b, f.offers) && f.knows(f.b, f.a, f.offers) })
	return f
}

// knows says whether x's router has y on topic.
func (f *forgetting) knows(x, y *p2ptest.Node, topic string) bool {
	return slices.Contains(x.Gossip.PubSub().ListPeers(topic), y.Host.ID())
}

// waitFor waits, a minute at most, until cond holds.
func (f *forgetting) waitFor(what string, cond func() bool) {
	f.t.Helper()
	waitUntil(f.t, time.Minute, what, cond)
}

// waitRepaired waits until node 0's router has node 1 on topics again,
// and node 1's has node 0 on offers, and checks that node 0 closed the
// old connections, reconnected once and holds a new one.
func (f *forgetting) waitRepaired(old []network.Conn, topics ...string) {
	f.t.Helper()
	a, b := f.a, f.b
	f.waitFor("both routers have each other back", func() bool {
		for _, t := range topics {
			if !f.knows(a, b, t) {
				return false
			}
		}
		return f.knows(b, a, f.offers)
	})
	if r := a.Gossip.RouterRepairs(); r.Missing != 0 || r.Reconnected != 1 {
		f.t.Fatalf("after the repair: %+v, want none missing, 1 reconnected", r)
	}
	for _, c := range old {
		if !c.IsClosed() {
			f.t.Fatalf("the old connection %s is still open: the repair closes it", c.RemoteMultiaddr())
		}
	}
	if !slices.ContainsFunc(a.Host.Network().ConnsToPeer(b.Host.ID()), func(c network.Conn) bool { return !c.IsClosed() }) {
		f.t.Fatal("no new connection between the two")
	}
}

// routerStreams counts the router's open streams from n to p.
func routerStreams(n *p2ptest.Node, p peer.ID) int {
	count := 0
	for _, c := range n.Host.Network().ConnsToPeer(p) {
		for _, st := range c.GetStreams() {
			if isRouterStream(st) {
				count++
			}
		}
	}
	return count
}

func isRouterStream(st network.Stream) bool {
	return strings.HasPrefix(string(st.Protocol()), "/meshsub/") && st.Stat().Direction == network.DirOutbound
}

// resetRouterStreams resets the router's streams from n to p and says
// how many there were.
func resetRouterStreams(n *p2ptest.Node, p peer.ID) int {
	reset := 0
	for _, c := range n.Host.Network().ConnsToPeer(p) {
		for _, st := range c.GetStreams() {
			if isRouterStream(st) {
				st.Reset()
				reset++
			}
		}
	}
	return reset
}
