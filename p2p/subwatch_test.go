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
			s := p2ptest.NewLoopback(t, 2, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a, b := s.Nodes[0], s.Nodes[1]
			topic := s.Swarm().Topic(p2p.TopicOffers)
			knows := func(x, y *p2ptest.Node) bool {
				return slices.Contains(x.Gossip.PubSub().ListPeers(topic), y.Host.ID())
			}
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				for !cond() {
					select {
					case <-ctx.Done():
						t.Fatalf("%s: %v", what, ctx.Err())
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
			waitFor("the two routers hear each other", func() bool { return knows(a, b) && knows(b, a) })

			hold := s.Swarm().Protocol("/idlegrid/subwatch-hold/1.0.0")
			b.Host.SetStreamHandler(hold, func(st network.Stream) {})
			held, err := a.Host.NewStream(ctx, b.Host.ID(), hold)
			if err != nil {
				t.Fatal(err)
			}
			conns := a.Host.Network().ConnsToPeer(b.Host.ID())

			if n := resetRouterStreams(a, b.Host.ID()); n != 1 {
				t.Fatalf("node 0 had %d router streams to node 1, want 1", n)
			}
			waitFor("node 0's router drops node 1's subscriptions", func() bool { return !knows(a, b) })
			if r := a.Gossip.RouterRepairs(); r.Forgotten != 1 || r.Reconnected != 0 {
				t.Fatalf("after the reset: %+v, want 1 forgotten, none reconnected", r)
			}
			// Due, and waited for twice: the held stream keeps the
			// connection.
			waitFor("the repair waits for the held stream", func() bool { return a.Gossip.RouterRepairs().Waited >= 2 })
			if r := a.Gossip.RouterRepairs(); r.Reconnected != 0 || knows(a, b) {
				t.Fatalf("with a stream held: %+v, node 0 knows node 1: %v; want it left alone and still forgotten", r, knows(a, b))
			}
			for _, c := range conns {
				if c.IsClosed() {
					t.Fatalf("connection %s closed while a stream of the swarm's own was open on it", c.RemoteMultiaddr())
				}
			}
			if _, err := held.Write([]byte("still here")); err != nil {
				t.Fatalf("the held stream: %v", err)
			}

			held.Close()
			waitFor("node 0's router has node 1 back", func() bool { return knows(a, b) && knows(b, a) })
			if r := a.Gossip.RouterRepairs(); r.Forgotten != 0 || r.Reconnected != 1 {
				t.Fatalf("after the repair: %+v, want none forgotten, 1 reconnected", r)
			}
			for _, c := range conns {
				if !c.IsClosed() {
					t.Fatalf("the old connection %s is still open: the repair closes it", c.RemoteMultiaddr())
				}
			}
		})
	}
}

// resetRouterStreams resets the router's streams from n to p and says
// how many there were.
func resetRouterStreams(n *p2ptest.Node, p peer.ID) int {
	reset := 0
	for _, c := range n.Host.Network().ConnsToPeer(p) {
		for _, st := range c.GetStreams() {
			if strings.HasPrefix(string(st.Protocol()), "/meshsub/") && st.Stat().Direction == network.DirOutbound {
				st.Reset()
				reset++
			}
		}
	}
	return reset
}
