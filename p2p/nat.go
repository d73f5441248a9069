package p2p

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
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
		opts = append(opts, libp2p.EnableHolePunching())
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

// directWait is how long a stream waits for hole punching to turn a
// relayed connection into a direct one before it takes the relay.
const directWait = 10 * time.Second

// punchReadyWait is how long after its start a host waits, before a
// stream, for its own hole punching service, which starts once identify
// has told the host a public address of its own.
const punchReadyWait = 5 * time.Second

// punchFailedFor is how long a peer that hole punching could not reach is
// taken through the relay at once, without waiting for a direct
// connection again; punchFailedMax bounds how many such peers are kept.
const (
	punchFailedFor = 10 * time.Minute
	punchFailedMax = 4096
)

// punchingHost is a host that runs DCUtR (NATConfig.HolePunching).
type punchingHost struct {
	host.Host
	*punchState
}

type punchState struct {
	started time.Time
	readyAt atomic.Int64  // when DCUtR was first served (Unix ns); 0: not yet
	ready   chan struct{} // closed when watchReady ends, readyAt set or not
	stop    context.CancelFunc
	mu      sync.Mutex
	failed  map[peer.ID]time.Time // when a wait for a direct connection failed
	lan     map[peer.ID][]ma.Multiaddr
}

func newPunchingHost(h host.Host) punchingHost {
	ctx, stop := context.WithCancel(context.Background())
	ps := &punchState{started: time.Now(), stop: stop, ready: make(chan struct{}), failed: map[peer.ID]time.Time{}, lan: map[peer.ID][]ma.Multiaddr{}}
	go ps.watchReady(ctx, h)
	go ps.watchLAN(ctx, h)
	return punchingHost{Host: h, punchState: ps}
}

// Close stops watching for hole punching and closes the host.
func (h punchingHost) Close() error {
	h.stop()
	return h.Host.Close()
}

// watchReady notes when h first serves DCUtR. The hole punching service
// sets its handler once identify has told it a public address, and the
// host announces each new handler on its event bus, so the moment is
// known to within the event's delivery: a relayed connection opened just
// after it (a fresh rent's first) is not taken for one that predates it.
func (s *punchState) watchReady(ctx context.Context, h host.Host) {
	defer close(s.ready)
	sub, err := h.EventBus().Subscribe(new(event.EvtLocalProtocolsUpdated))
	if err != nil {
		return
	}
	defer sub.Close()
	for !punchReady(h) {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub.Out():
			if !ok {
				return
			}
		}
	}
	s.readyAt.Store(time.Now().UnixNano())
}

// missedPunch reports, for a host that serves DCUtR now, whether every
// connection to p opened before it did: the peer's one hole punching
// attempt, made as the relayed connection opened, found no one to answer.
// Where the moment is not known (the watcher ended without it), it says
// no: closing a connection whose punch may be under way would lose it.
func (s *punchState) missedPunch(h host.Host, p peer.ID) bool {
	<-s.ready // at once: the handler is set, and its event on its way
	ready := s.readyAt.Load()
	if ready == 0 {
		return false
	}
	conns := h.Network().ConnsToPeer(p)
	for _, c := range conns {
		if c.Stat().Opened.UnixNano() >= ready {
			return false
		}
	}
	return len(conns) > 0
}

// recentlyFailed reports whether a wait for a direct connection to p
// failed within punchFailedFor.
func (s *punchState) recentlyFailed(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.failed[p]
	if ok && time.Since(at) > punchFailedFor {
		delete(s.failed, p)
		return false
	}
	return ok
}

func (s *punchState) punchFailed(p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) >= punchFailedMax {
		for q, at := range s.failed {
			if time.Since(at) > punchFailedFor || len(s.failed) >= punchFailedMax {
				delete(s.failed, q)
			}
		}
	}
	s.failed[p] = time.Now()
}

// punchReady reports whether h answers hole punching now: its service
// serves DCUtR only once identify has told it a public address.
func punchReady(h host.Host) bool {
	return slices.Contains(h.Mux().Protocols(), holepunch.Protocol)
}

// OpenStream opens a stream of pid to p. Over a relayed connection it
// first waits up to directWait for a direct one (DCUtR), so that a lease's
// streams and a job's output go direct whenever hole punching can; only
// when that fails (a symmetric NAT) does it use the relay, within the
// relay's limits, and for the next 10 minutes it takes the relay to that
// peer at once. A host that cannot punch holes (none configured, or no
// public address of its own to punch from) uses what connection there is.
//
// The peer behind the relay starts hole punching once, as the relayed
// connection opens; a host that has just started (a fresh rent) may not
// answer it yet. Over a relayed connection such a host waits up to 5 s
// for its own service, and a relayed connection older than the service is
// opened again, for a second attempt.
func OpenStream(ctx context.Context, h host.Host, p peer.ID, pid protocol.ID) (network.Stream, error) {
	relayed := network.WithAllowLimitedConn(ctx, "no direct connection")
	ph, punching := h.(punchingHost)
	if !punching {
		return h.NewStream(relayed, p, pid)
	}
	if h.Network().Connectedness(p) == network.Limited {
		if !punchReady(h) && time.Since(ph.started) < punchReadyWait {
			wait, cancel := context.WithDeadline(ctx, ph.started.Add(punchReadyWait))
			for !punchReady(h) && wait.Err() == nil {
				select {
				case <-wait.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
			cancel()
		}
		if punchReady(h) && ph.missedPunch(h, p) {
			h.Network().ClosePeer(p)
			if err := h.Connect(ctx, peer.AddrInfo{ID: p, Addrs: h.Peerstore().Addrs(p)}); err != nil {
				return nil, fmt.Errorf("reconnect through the relay: %w", err)
			}
		}
	}
	// Hole punching dials public addresses only: a peer on this host's
	// own network, behind the same NAT, is reached on its private ones.
	lan := ph.dialLAN(ctx, h, p)
	if !punchReady(h) || ph.recentlyFailed(p) {
		if lan != nil {
			<-lan // bounded by lanDialWait
		}
		return h.NewStream(relayed, p, pid) // direct, where the dial got through
	}
	s, err := h.NewStream(network.WithDialPeerTimeout(ctx, directWait), p, pid)
	if err == nil || ctx.Err() != nil || h.Network().Connectedness(p) != network.Limited {
		return s, err
	}
	ph.punchFailed(p)
	return h.NewStream(relayed, p, pid)
}

// lanDialWait bounds a direct dial to a relayed peer's private addresses.
const lanDialWait = 3 * time.Second

// lanMax bounds the peers whose private addresses a punching host keeps,
// and lanAddrsMax the addresses it keeps of each.
const (
	lanMax      = 4096
	lanAddrsMax = 8
)

// watchLAN keeps, for peers identified over a relayed connection, the
// private addresses they listen on: identify leaves them out of the
// peerstore where the connection's remote end is public (a relay), and
// hole punching dials public addresses only, so a peer behind the same
// NAT as this host is reached on neither without them.
func (s *punchState) watchLAN(ctx context.Context, h host.Host) {
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		return
	}
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			ev := e.(event.EvtPeerIdentificationCompleted)
			if ev.Conn == nil || !ev.Conn.Stat().Limited {
				continue
			}
			var private []ma.Multiaddr
			for _, a := range ev.ListenAddrs {
				if len(private) < lanAddrsMax && !IsRelayed(a) && manet.IsPrivateAddr(a) {
					private = append(private, a)
				}
			}
			s.mu.Lock()
			if len(private) == 0 {
				delete(s.lan, ev.Peer)
			} else {
				if _, ok := s.lan[ev.Peer]; !ok && len(s.lan) >= lanMax {
					for q := range s.lan { // any one: a bound, not a cache
						delete(s.lan, q)
						break
					}
				}
				s.lan[ev.Peer] = private
			}
			s.mu.Unlock()
		}
	}
}

// dialLAN dials p, connected only through a relay, on those of its
// private addresses (watchLAN) that lie in a subnet of this machine's
// own interfaces, in the background, up to lanDialWait: where p is on
// this host's network, that connection is direct, and a stream waiting
// for one takes it. It returns a channel closed when the dial ends, or
// nil where there is nothing to dial. A peer cannot so have this host
// dial addresses off its own networks.
func (s *punchState) dialLAN(ctx context.Context, h host.Host, p peer.ID) <-chan struct{} {
	if h.Network().Connectedness(p) != network.Limited {
		return nil
	}
	s.mu.Lock()
	private := s.lan[p]
	s.mu.Unlock()
	var addrs []ma.Multiaddr
	for _, a := range private {
		if onLink(a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(network.WithForceDirectDial(ctx, "a peer on this network"), lanDialWait)
		defer cancel()
		h.Connect(ctx, peer.AddrInfo{ID: p, Addrs: addrs}) // a failure leaves the relay
	}()
	return done
}

// onLink reports whether a's IP lies in a subnet of one of this
// machine's interfaces (its own included: a peer on this machine).
func onLink(a ma.Multiaddr) bool {
	ip, err := manet.ToIP(a)
	if err != nil {
		return false
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok && n.Contains(ip) {
			return true
		}
	}
	return false
}

// ForgetDialBackoff lets the next dial to p go out at once: after a
// failed dial the swarm refuses to dial a peer again for 5 s and more,
// which would keep a renter from a provider that has just restarted. (A
// forced direct dial would skip the backoff too, but also every relay: a
// provider behind a NAT could never be reached so.)
func ForgetDialBackoff(h host.Host, p peer.ID) {
	if sw, ok := h.Network().(interface{ Backoff() *swarm.DialBackoff }); ok {
		sw.Backoff().Clear(p)
	}
}
