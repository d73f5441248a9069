package p2p_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	ma "github.com/multiformats/go-multiaddr"
)

// vouchSet is the relay's stand-in for its book: the peers it vouches for.
type vouchSet struct {
	mu sync.Mutex
	ps map[peer.ID]bool
}

func (v *vouchSet) add(p peer.ID) { v.mu.Lock(); v.ps[p] = true; v.mu.Unlock() }
func (v *vouchSet) has(p peer.ID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ps[p]
}

// relayFor starts a public relay on loopback with lim, vouching by v (nil:
// for no one), and waits until it serves circuit relay v2 to a first peer.
func relayFor(t *testing.T, sw p2p.Swarm, lim p2p.RelayLimits, vouch func(peer.ID) bool) (host.Host, func(nat p2p.NATConfig) host.Host) {
	t.Helper()
	mk := func(nat p2p.NATConfig) host.Host {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p2p.NewHost(p2p.HostConfig{Identity: key, Swarm: sw, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")},
			ConnLow: 200, ConnHigh: 400, Limits: p2p.DefaultLimits, NAT: nat})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	return mk(p2p.NATConfig{Reachability: p2p.ReachPublic, RelayService: true, Relay: lim, Vouch: vouch}), mk
}

// reserve connects h to the relay, waits until h knows it relays and the
// relay knows h serves the swarm's echo protocol, and asks for a
// reservation. The second wait is for the relay's evidence, not for
// time: identify answers from a snapshot of h's protocols that h updates
// as an event of its own, so a handler set just before the connection
// may reach the relay only with identify's push after it, and a relay
// asked before judges a peer that serves nothing of the swarm. A daemon
// sets its handlers at its start, long before AutoRelay asks.
func reserve(ctx context.Context, t *testing.T, h, relay host.Host, echo protocol.ID) error {
	t.Helper()
	ai := peer.AddrInfo{ID: relay.ID(), Addrs: relay.Addrs()}
	if err := h.Connect(ctx, ai); err != nil {
		t.Fatal(err)
	}
	for {
		relays, _ := h.Peerstore().SupportsProtocols(relay.ID(), proto.ProtoIDv2Hop)
		serves, _ := relay.Peerstore().SupportsProtocols(h.ID(), echo)
		if len(relays) > 0 && len(serves) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the relay serves circuit relay v2: %v; the relay knows %s serves %s: %v", len(relays) > 0, h.ID(), echo, len(serves) > 0)
		case <-time.After(50 * time.Millisecond):
		}
	}
	_, err := client.Reserve(ctx, h, ai)
	return err
}

// TestFreshKeysThatServeTheSwarmGetNoRelayReservation: keys cost nothing,
// so an attacker starts fresh hosts on loopback that serve the swarm's
// protocols and asks the relay for reservations, more than its pool
// holds, each staying connected. None gets one; a provider the relay
// vouches for (in a node: its offer is in the relay's book) still does,
// and so does the next.
func TestFreshKeysThatServeTheSwarmGetNoRelayReservation(t *testing.T) {
	sw := p2p.Swarm{Name: p2p.PublicSwarm}
	vouched := &vouchSet{ps: map[peer.ID]bool{}}
	lim := p2p.DefaultRelayLimits
	lim.Reservations, lim.PerIP = 6, 64 // a small pool; loopback is one IP
	relay, mk := relayFor(t, sw, lim, vouched.has)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	echo := sw.Protocol("/idlegrid/echo/1.0.0")
	serve := func(h host.Host) host.Host {
		h.SetStreamHandler(echo, func(s network.Stream) { s.Close() })
		return h
	}
	granted := 0
	for range 3 * lim.Reservations {
		fake := serve(mk(p2p.NATConfig{Reachability: p2p.ReachPrivate}))
		if err := reserve(ctx, t, fake, relay, echo); err == nil {
			granted++
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	if granted > 0 {
		t.Errorf("%d of %d fresh keys that only serve the swarm's protocols got a relay reservation", granted, 3*lim.Reservations)
	}
	for i := range 2 {
		provider := serve(mk(p2p.NATConfig{Reachability: p2p.ReachPrivate}))
		vouched.add(provider.ID())
		if err := reserve(ctx, t, provider, relay, echo); err != nil {
			t.Errorf("provider %d, whose offer the relay holds: %v", i, err)
		}
	}
}

// A relay given nothing to vouch by reserves for no peer of the public
// swarm, and says so with the refusal libp2p names.
func TestARelayWithoutVouchReservesForNoOne(t *testing.T) {
	sw := p2p.Swarm{Name: p2p.PublicSwarm}
	relay, mk := relayFor(t, sw, p2p.DefaultRelayLimits, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := mk(p2p.NATConfig{Reachability: p2p.ReachPrivate})
	echo := sw.Protocol("/idlegrid/echo/1.0.0")
	h.SetStreamHandler(echo, func(s network.Stream) { s.Close() })
	err := reserve(ctx, t, h, relay, echo)
	var re client.ReservationError
	if !errors.As(err, &re) || re.Status.String() != "PERMISSION_DENIED" {
		t.Errorf("reservation: %v, want PERMISSION_DENIED", err)
	}
}
