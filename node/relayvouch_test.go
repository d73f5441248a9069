package node

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	ma "github.com/multiformats/go-multiaddr"
)

// TestARelayReservesForProvidersInItsBookNotForFreshKeys: a public daemon
// relays for its swarm. Fresh keys on loopback that serve the swarm's
// protocols but published no offer ask it for more reservations than it
// holds, and stay connected: it refuses them all. A provider whose offer
// is in its book then gets one.
func TestARelayReservesForProvidersInItsBookNotForFreshKeys(t *testing.T) {
	t.Parallel()
	relay := startNode(t, testRepo(t, "relay", func(c *config.Config) {
		c.NAT.Reachability, c.NAT.RelayService, c.NAT.RelayReserve = "public", true, 4
	}), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(relay), asProvider("A100 SXM 80GB", 8, 80, "2.00", "DE"))), Options{})
	waitFor(t, 20*time.Second, "the relay's book holds the provider's offer", bookHolds(relay, 1))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ai := peer.AddrInfo{ID: relay.id, Addrs: relay.host.Addrs()}
	ask := func(h host.Host) error {
		t.Helper()
		if err := h.Connect(ctx, ai); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the relay serves circuit relay v2", func() bool {
			ok, _ := h.Peerstore().SupportsProtocols(relay.id, proto.ProtoIDv2Hop)
			return len(ok) > 0
		})
		_, err := client.Reserve(ctx, h, ai)
		return err
	}
	granted := 0
	for range 12 {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p2p.NewHost(p2p.HostConfig{Identity: key, Swarm: relay.swarm, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")},
			ConnLow: 16, ConnHigh: 32, Limits: p2p.DefaultLimits, NAT: p2p.NATConfig{Reachability: p2p.ReachPrivate}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		h.SetStreamHandler(relay.swarm.Protocol("/idlegrid/echo/1.0.0"), func(s network.Stream) { s.Close() })
		if ask(h) == nil {
			granted++
		}
	}
	if granted > 0 {
		t.Errorf("%d of 12 fresh keys with no offer got a relay reservation", granted)
	}
	if err := ask(prov.host); err != nil {
		t.Errorf("the provider whose offer the relay holds: %v", err)
	}
}
