package node

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// testNet is a network a test's nodes run on: real hosts on loopback
// (TCP and QUIC), or mocknet with the latencies of a real matrix.
type testNet interface {
	// on returns o with the node's host made on this network.
	on(o Options) Options
	// bare is a host on this network for key that runs no node (a
	// Sybil's, say).
	bare(t *testing.T, key crypto.PrivKey) host.Host
	// drop takes n's machine off the network at once: its host closes
	// and no one can reach it.
	drop(n *Node)
}

// loopback is the network of real hosts on 127.0.0.1.
type loopback struct{}

func (loopback) on(o Options) Options { return o }

func (loopback) bare(t *testing.T, key crypto.PrivKey) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func (loopback) drop(n *Node) { n.host.Close() }

// forEachNet runs test on loopback and on mocknet with PlanetLab
// latencies, in parallel.
func forEachNet(t *testing.T, test func(t *testing.T, net testNet)) {
	t.Run("loopback", func(t *testing.T) {
		t.Parallel()
		test(t, loopback{})
	})
	t.Run("mocknet-planetlab", func(t *testing.T) {
		t.Parallel()
		test(t, newMockSwarm(t))
	})
}

// mockSwarm puts nodes on one mocknet whose links carry the PlanetLab
// matrix's latencies: each identity gets the next row (and keeps it across
// restarts) and its own address in 198.18.0.0/15, and is linked to every
// host already there at the pair's RTT (half each way).
type mockSwarm struct {
	mn     mocknet.Mocknet
	m      p2ptest.Matrix
	stride int

	mu   sync.Mutex
	rows map[peer.ID]int
}

func newMockSwarm(t testing.TB) *mockSwarm {
	t.Helper()
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	return newMockSwarmOn(t, m, rowStride)
}

// newMockSwarmOn is a mockSwarm on matrix m, the i-th identity at row
// i×stride.
func newMockSwarmOn(t testing.TB, m p2ptest.Matrix, stride int) *mockSwarm {
	t.Helper()
	s := &mockSwarm{mn: mocknet.New(), m: m, stride: stride, rows: map[peer.ID]int{}}
	t.Cleanup(func() { s.mn.Close() })
	return s
}

// on returns o with its host made on the mocknet.
func (s *mockSwarm) on(o Options) Options {
	o.Host = s.host
	return o
}

func (s *mockSwarm) bare(t *testing.T, key crypto.PrivKey) host.Host {
	t.Helper()
	h, err := s.host(key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// drop unlinks n from every other host, so that no dial to it succeeds
// (not even one racing the close), and closes its host.
func (s *mockSwarm) drop(n *Node) {
	for _, p := range s.mn.Peers() {
		if p != n.id {
			s.mn.UnlinkPeers(n.id, p)
		}
	}
	n.host.Close()
}

// rowStride spreads a test's few nodes over the matrix: consecutive rows
// are often one site's machines, a millisecond apart.
const rowStride = 3

// row is the matrix row of p (a peer new to the swarm takes the next).
func (s *mockSwarm) row(p peer.ID) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[p]
	if !ok {
		r = len(s.rows) * s.stride % len(s.m)
		s.rows[p] = r
	}
	return r, ok
}

func (s *mockSwarm) host(key crypto.PrivKey) (host.Host, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	row, again := s.row(id)
	if again { // a restart: its old host's links go with it
		for _, p := range s.mn.Peers() {
			if p != id {
				s.mn.UnlinkPeers(id, p)
			}
		}
	}
	h, err := s.mn.AddPeer(key, p2ptest.MockAddr(row))
	if err != nil {
		return nil, err
	}
	ping.NewPingService(h)
	for _, p := range s.mn.Peers() {
		if p == id {
			continue
		}
		l, err := s.mn.LinkPeers(id, p)
		if err != nil {
			h.Close()
			return nil, err
		}
		other, _ := s.row(p)
		l.SetOptions(mocknet.LinkOptions{Latency: s.m.OneWay(row, other)})
	}
	return h, nil
}

// A host made for the node must run as the node's identity: one that
// runs as another peer would sign nothing the swarm could check.
func TestAHostOfAnotherIdentityIsRefused(t *testing.T) {
	s := newMockSwarm(t)
	other, _, _ := crypto.GenerateEd25519Key(nil)
	n := newNode(t, testRepo(t, "node", nil), Options{Host: func(crypto.PrivKey) (host.Host, error) { return s.host(other) }})
	err := n.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not as this node's identity "+n.id.String()) {
		t.Fatalf("start: %v", err)
	}
}
