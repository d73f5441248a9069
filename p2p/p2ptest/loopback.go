package p2ptest

import (
	"cmp"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	ma "github.com/multiformats/go-multiaddr"
)

// NewLoopback builds a swarm of n nodes on real libp2p hosts from
// p2p.NewHost, listening on 127.0.0.1 over TCP and (in a public swarm)
// QUIC on ports the kernel picks. Node 0 is every other node's only
// bootstrap peer.
func NewLoopback(t testing.TB, n int, opts ...Option) *Swarm {
	t.Helper()
	cfg := newConfig(t, n, opts)
	if cfg.matrix != nil {
		t.Fatalf("p2ptest: WithLatency applies to mocknet only; loopback has no link latency")
	}
	s := newSwarm(cfg)
	t.Cleanup(s.cleanup(t))
	for i := range n {
		h, err := newLoopbackHost(cfg)
		if err != nil {
			t.Fatalf("p2ptest: loopback node %d: %v", i, err)
		}
		nd := &Node{Host: h}
		if cfg.traffic {
			nd.Traffic = new(Traffic)
			nd.Host = &wrappedHost{Host: h, traffic: nd.Traffic}
		}
		s.Nodes = append(s.Nodes, nd)
	}
	s.start(t)
	return s
}

func newLoopbackHost(cfg config) (host.Host, error) {
	swarm := cfg.swarm
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	listen := []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}
	switch {
	case cfg.quicOnly && !swarm.Private():
		listen = []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1")}
	case !swarm.Private():
		listen = append(listen, ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1"))
	}
	return p2p.NewHost(p2p.HostConfig{
		Identity:    key,
		Swarm:       swarm,
		ListenAddrs: listen,
		ConnLow:     cmp.Or(cfg.low, 100),
		ConnHigh:    cmp.Or(cfg.high, 400),
		ConnGrace:   cmp.Or(cfg.grace, time.Minute),
		Limits:      p2p.DefaultLimits,
		UserAgent:   "idlegrid-p2ptest",
	})
}
