package p2p

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"
)

// Reachability settings of NATConfig.
const (
	ReachAuto    = "auto"    // AutoNAT asks peers to dial back
	ReachPublic  = "public"  // the operator knows the node is reachable
	ReachPrivate = "private" // the operator knows it is not
)

// NATConfig is how a host gets through NATs and firewalls, with go-libp2p's
// own stack: AutoNAT (v1 and v2) tells whether the node is publicly
// reachable; while it is not, AutoRelay takes circuit relay v2
// reservations on relays among the swarm's connected peers and advertises
// the relayed addresses, and DCUtR upgrades a relayed connection to a
// direct one by hole punching; a port mapping (UPnP IGD, NAT-PMP) is asked
// of the router. A publicly reachable node relays for the swarm's own
// peers, within RelayLimits. The zero value turns all of it off but the
// circuit transport, with which any host dials a relayed address.
type NATConfig struct {
	// Reachability is ReachAuto, ReachPublic or ReachPrivate; empty is
	// ReachAuto.
	Reachability string
	// PortMap asks the router for a port mapping.
	PortMap bool
	// HolePunching upgrades relayed connections to direct ones (DCUtR).
	HolePunching bool
	// AutoRelay takes relay reservations while the node is private.
	AutoRelay bool
	// RelayService relays for the swarm's peers while the node is public.
	RelayService bool
	Relay        RelayLimits
	// Vouch says whether the relay reserves a slot for a peer of the
	// public swarm: one that proved something that cost it, such as an
	// offer in this node's book, a lease with this node or a trust path.
	// Serving the swarm's protocols costs a fresh key nothing, so it is
	// not enough. Vouch is called as reservations arrive and must be
	// quick and safe for concurrent use; nil vouches for no one. In a
	// private swarm the swarm key is the proof, and Vouch is not asked.
	Vouch func(peer.ID) bool
}

// RelayLimits bound what a relay gives the swarm's peers. Every relayed
// connection is reset at Duration or once Bytes passed either way; the
// peers it joined open streams over it only for what cannot wait for a
// direct connection (see OpenStream), and a renter's job stream reattaches.
type RelayLimits struct {
	Reservations    int           // reservations held at once
	CircuitsPerPeer int           // relayed connections open per peer
	Duration        time.Duration // a relayed connection's life
	Bytes           int64         // bytes relayed each way on one connection
	// PerIP and PerASN bound the reservations held for peers behind one
	// IP address and one autonomous system (0: 8 and 32), so that one
	// network cannot hold them all even with every peer vouched for.
	PerIP, PerASN int
}

// DefaultRelayLimits are a daemon's: 128 reservations, 16 circuits per
// peer, 10 minutes and 16 MiB per circuit (libp2p's defaults, 2 minutes
// and 128 KiB, end a lease's control streams mid-way), 8 reservations per
// IP address (a lab's GPU hosts behind one NAT) and 32 per AS.
var DefaultRelayLimits = RelayLimits{Reservations: 128, CircuitsPerPeer: 16, Duration: 10 * time.Minute, Bytes: 16 << 20, PerIP: 8, PerASN: 32}

// hostRef is a host that libp2p's parts may ask for before it is built.
type hostRef struct{ p atomic.Pointer[host.Host] }

func (r *hostRef) set(h host.Host) { r.p.Store(&h) }

// get is the host, or nil before it is built.
func (r *hostRef) get() host.Host {
	if h := r.p.Load(); h != nil {
		return *h
	}
	return nil
}

// natOptions are the libp2p options that carry out c for a host in swarm
// sw; h is set to the host once it is built (the relay's access list and
// AutoRelay's peer source read it). With reg, a relay counts what it
// relays there (libp2p_relaysvc_*: reservations, circuits, bytes).
func natOptions(c NATConfig, sw Swarm, h *hostRef, reg prometheus.Registerer) ([]libp2p.Option, error) {
	opts := []libp2p.Option{libp2p.EnableRelay()}
	switch c.Reachability {
	case "", ReachAuto:
		opts = append(opts, libp2p.EnableAutoNATv2(), libp2p.EnableNATService())
	case ReachPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic(), libp2p.EnableNATService())
	case ReachPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	default:
		return nil, fmt.Errorf("reachability %q: want %s, %s or %s", c.Reachability, ReachAuto, ReachPublic, ReachPrivate)
	}
	if c.PortMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	if c.HolePunching {
		opts = append(opts, libp2p.EnableHolePunching(holepunch.WithAddrFilter(newOneTransport())))
	}
	if c.AutoRelay {
		// A relay refuses a provider until its offer has reached the
		// relay's book, which may be just after the provider first asks:
		// ask again within relayBackoff (libp2p's default is an hour).
		opts = append(opts, libp2p.EnableAutoRelayWithPeerSource(relaysAmongPeers(h),
			autorelay.WithBootDelay(0), autorelay.WithMinInterval(10*time.Second), autorelay.WithBackoff(relayBackoff)))
	}
	if c.RelayService {
		l := c.Relay
		res := relayv2.DefaultResources()
		res.MaxReservations, res.MaxCircuits = l.Reservations, l.CircuitsPerPeer
		res.Limit = &relayv2.RelayLimit{Duration: l.Duration, Data: l.Bytes}
		if l.PerIP > 0 {
			res.MaxReservationsPerIP = l.PerIP
		}
		if l.PerASN > 0 {
			res.MaxReservationsPerASN = l.PerASN
		}
		ropts := []relayv2.Option{relayv2.WithResources(res), relayv2.WithACL(swarmACL{h: h, sw: sw, vouch: c.Vouch})}
		if reg != nil {
			ropts = append(ropts, relayv2.WithMetricsTracer(relayv2.NewMetricsTracer(relayv2.WithRegisterer(reg))))
		}
		opts = append(opts, libp2p.EnableRelayService(ropts...))
	}
	return opts, nil
}

// relaysAmongPeers is AutoRelay's source of candidates: connected peers
// that serve circuit relay v2 (public daemons of the swarm do).
func relaysAmongPeers(ref *hostRef) autorelay.PeerSource {
	return func(ctx context.Context, num int) <-chan peer.AddrInfo {
		out := make(chan peer.AddrInfo, num)
		defer close(out)
		h := ref.get()
		if h == nil {
			return out
		}
		for _, p := range h.Network().Peers() {
			if len(out) == num {
				break
			}
			if ok, err := h.Peerstore().SupportsProtocols(p, proto.ProtoIDv2Hop); err == nil && len(ok) > 0 {
				out <- peer.AddrInfo{ID: p, Addrs: h.Peerstore().Addrs(p)}
			}
		}
		return out
	}
}

// relayBackoff is how long AutoRelay waits before it asks a relay that
// refused it again.
const relayBackoff = 20 * time.Second

// swarmACL lets a relay serve only its swarm's peers: a peer is one when
// it serves a protocol of the swarm (every node serves the coordinate
// exchange and book sync). In a private swarm the key has already said so;
// in the public swarm the check keeps other libp2p networks off the relay.
// A reservation holds a slot of a bounded pool for an hour, and keys cost
// nothing, so in the public swarm only a peer the node vouches for (see
// NATConfig.Vouch) gets one; the relay's limits bound what it may take.
type swarmACL struct {
	h     *hostRef
	sw    Swarm
	vouch func(peer.ID) bool
}

func (a swarmACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if !a.sw.Private() && (a.vouch == nil || !a.vouch(p)) {
		return false // asked first: it is quick, and a stranger waits for nothing
	}
	return a.member(p)
}

func (a swarmACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	return a.member(src) && a.member(dest)
}

// identifyWait bounds how long the relay waits for identify to learn a
// peer's protocols.
const identifyWait = 5 * time.Second

func (a swarmACL) member(p peer.ID) bool {
	h := a.h.get()
	if h == nil {
		return false
	}
	if a.sw.Private() {
		return true
	}
	if ids, ok := h.(interface{ IDService() identify.IDService }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), identifyWait)
		defer cancel()
		for _, c := range h.Network().ConnsToPeer(p) {
			select {
			case <-ids.IDService().IdentifyWait(c):
			case <-ctx.Done():
			}
		}
	}
	protos, err := h.Peerstore().GetProtocols(p)
	if err != nil {
		return false
	}
	prefix := a.sw.Protocol("/idlegrid/")
	for _, id := range protos {
		if strings.HasPrefix(string(id), string(prefix)) {
			return true
		}
	}
	return false
}

// How a host is reached (Reachability.How).
const (
	ReachDirect  = "direct"
	ReachRelayed = "relayed"
	ReachNone    = "none"
)

// Reachability is what a host knows of how peers reach it.
type Reachability struct {
	// State is public, private or unknown (AutoNAT has not decided).
	State string `json:"state"`
	// How: direct (public addresses), relayed (through relays' circuit
	// addresses) or none.
	How string `json:"how"`
	// Addrs are the addresses the host advertises.
	Addrs []string `json:"addrs"`
}

// ReachabilityWatch follows a host's reachability from its event bus.
type ReachabilityWatch struct {
	h     host.Host
	state atomic.Int32 // a network.Reachability
	sub   event.Subscription
}

// WatchReachability subscribes to h's reachability events.
func WatchReachability(h host.Host) (*ReachabilityWatch, error) {
	sub, err := h.EventBus().Subscribe(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return nil, fmt.Errorf("reachability: %w", err)
	}
	w := &ReachabilityWatch{h: h, sub: sub} // state 0: ReachabilityUnknown
	go func() {
		for e := range sub.Out() {
			w.state.Store(int32(e.(event.EvtLocalReachabilityChanged).Reachability))
		}
	}()
	return w, nil
}

// Close ends the subscription.
func (w *ReachabilityWatch) Close() error { return w.sub.Close() }

// Now is the host's reachability as of the last event, with the
// addresses it advertises.
func (w *ReachabilityWatch) Now() Reachability {
	r := network.Reachability(w.state.Load())
	out := Reachability{State: strings.ToLower(r.String()), How: ReachNone}
	relayed, direct := false, false
	for _, a := range w.h.Addrs() {
		out.Addrs = append(out.Addrs, a.String())
		if IsRelayed(a) {
			relayed = true
		} else if manet.IsPublicAddr(a) {
			direct = true
		}
	}
	switch {
	case r == network.ReachabilityPublic || (r != network.ReachabilityPrivate && direct):
		out.How = ReachDirect
	case relayed:
		out.How = ReachRelayed
	}
	return out
}

// IsRelayed reports whether a is a circuit relay address.
func IsRelayed(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
