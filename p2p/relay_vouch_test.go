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

// reserve connects h to the relay so that the relay knows h serves the
// swarm's echo protocol (see known), waits until h knows it relays, and
// asks for a reservation.
func reserve(ctx context.Context, t *testing.T, h, relay host.Host, echo protocol.ID) error {
	t.Helper()
	known(ctx, t, h, relay, echo)
	waitServes(ctx, t, h, relay.ID(), proto.ProtoIDv2Hop)
	_, err := client.Reserve(ctx, h, peer.AddrInfo{ID: relay.ID(), Addrs: relay.Addrs()})
	return err
}

// known connects h to to and returns once to has learned through
// identify that h serves id; it waits for that evidence, not for time.
// Identify answers from a snapshot of h's protocols that h updates as an
// event of its own. A handler set just before the connection reaches to
// with identify's push after its answer, and to may take the two in
// either order: taken last, the older answer leaves to unaware of id for
// the connection's life. So a connection after which to has not learned
// it within a second is closed and made again, with h's snapshot by then
// up to date. A daemon sets its handlers at its start, long before it
// dials; a test that sets one and dials at once meets the race.
func known(ctx context.Context, t *testing.T, h, to host.Host, id protocol.ID) {
	t.Helper()
	for {
		if err := h.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
			t.Fatal(err)
		}
		try, cancel := context.WithTimeout(ctx, time.Second)
		ok := servesBy(try, to, h.ID(), id)
		cancel()
		if ok {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never learned that %s serves %s", to.ID(), h.ID(), id)
		}
		h.Network().ClosePeer(to.ID())
	}
}

// waitServes waits until h has learned, through identify, that p serves
// id.
func waitServes(ctx context.Context, t *testing.T, h host.Host, p peer.ID, id protocol.ID) {
	t.Helper()
	if !servesBy(ctx, h, p, id) {
		t.Fatalf("%s never learned that %s serves %s", h.ID(), p, id)
	}
}

// servesBy says whether h learns before ctx ends that p serves id.
func servesBy(ctx context.Context, h host.Host, p peer.ID, id protocol.ID) bool {
	for {
		if ok, _ := h.Peerstore().SupportsProtocols(p, id); len(ok) > 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
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
