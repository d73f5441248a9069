package p2p_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A copy of a message that admission refuses is dropped before gossipsub
// reads it, so the message is not lost: the next copy, from another
// relay, is asked about on its own and brings it. Once one copy is let
// in, later copies pass unasked, so a relay never pays a budget for the
// duplicates the mesh sends. Three nodes, all in one mesh: node 0
// publishes, node 2 gets a copy from node 0 (flood publishing) and one
// from node 1 (its mesh relay), and refuses whichever comes first. Over
// QUIC (a public swarm's hosts listening on it alone) and TCP (a private
// swarm's only transport).
func TestARefusedCopyLeavesTheMessageToTheNextRelay(t *testing.T) {
	for _, tc := range gossipTransports(t) {
		t.Run(tc.name, func(t *testing.T) {
			s := p2ptest.NewLoopback(t, 3, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := s.WaitMesh(ctx, p2p.TopicOffers); err != nil {
				t.Fatal(err)
			}
			for _, c := range s.Nodes[2].Host.Network().Conns() {
				if p2p.IsQUIC(c.RemoteMultiaddr()) != (tc.name == "quic") {
					t.Fatalf("node 2's connection %s is not over %s", c.RemoteMultiaddr(), tc.name)
				}
			}
			var mu sync.Mutex
			var asked []peer.ID
			let := -1 // the ask that let it in
			s.Nodes[2].Gossip.SetAdmission(func(kind string, from peer.ID, data []byte) bool {
				if kind != p2p.TopicOffers || string(data) != "the offer" {
					return true
				}
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, from)
				if len(asked) == 1 {
					return false // the first copy, whoever relayed it
				}
				if let < 0 {
					let = len(asked) - 1
				}
				return true
			}, nil)
			sub, err := s.Nodes[2].Gossip.Topic(p2p.TopicOffers).Subscribe()
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Cancel()
			if err := s.Nodes[0].Gossip.Topic(p2p.TopicOffers).Publish(ctx, []byte("the offer")); err != nil {
				t.Fatal(err)
			}
			msg, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("the refused first copy lost the message: %v", err)
			}
			if string(msg.Data) != "the offer" {
				t.Fatalf("got %q", msg.Data)
			}
			// The router drops the copies it has seen before asking no one:
			// a message published after it proves the earlier one's copies are
			// all through node 2's event loop.
			if err := s.Nodes[0].Gossip.Topic(p2p.TopicOffers).Publish(ctx, []byte("the next")); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(m.Data) == "the next" {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) < 2 || asked[0] == asked[1] {
				t.Fatalf("admission was asked about copies from %v; want the refused one, then another relay's", asked)
			}
			if let != len(asked)-1 {
				t.Errorf("admission was asked about copies from %v, and let in the one from %s: a copy after that was asked again", asked, asked[let])
			}
		})
	}
}

// transport is a way a loopback swarm's hosts connect.
type transport struct {
	name string
	opts []p2ptest.Option
}

// gossipTransports are QUIC (a public swarm's hosts listening on it
// alone) and TCP (a private swarm's only transport).
func gossipTransports(t *testing.T) []transport {
	return []transport{
		{"quic", []p2ptest.Option{p2ptest.WithQUIC()}},
		{"tcp", []p2ptest.Option{p2ptest.WithSwarm(privateSwarm(t))}},
	}
}

// privateSwarm is a private swarm with a fresh key: its hosts speak TCP
// only.
func privateSwarm(t *testing.T) p2p.Swarm {
	t.Helper()
	key, err := p2p.GenerateSwarmKey()
	if err != nil {
		t.Fatal(err)
	}
	return p2p.Swarm{Name: "lab", PSK: key}
}
