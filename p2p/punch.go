package p2p

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Hole punching and the LAN: how a stream gets off a relayed connection
// (OpenStream), and what a host watches to know when it may.

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
	lanSync chan chan struct{} // syncLAN's requests to watchLAN
	lanGone chan struct{}      // closed when watchLAN ends
}

// Unwrap is the host punchingHost wraps.
func (h punchingHost) Unwrap() host.Host { return h.Host }

func newPunchingHost(h host.Host) punchingHost {
	ctx, stop := context.WithCancel(context.Background())
	ps := &punchState{started: time.Now(), stop: stop, ready: make(chan struct{}), failed: map[peer.ID]time.Time{}, lan: map[peer.ID][]ma.Multiaddr{},
		lanSync: make(chan chan struct{}), lanGone: make(chan struct{})}
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

// OpenStream opens a stream to p of the first of pids it serves, on
// host.NewStream's terms. Over a relayed connection it first waits up to directWait for a direct one (DCUtR), so that a lease's
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
func OpenStream(ctx context.Context, h host.Host, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	relayed := network.WithAllowLimitedConn(ctx, "no direct connection")
	ph, punching := h.(punchingHost)
	if !punching {
		return h.NewStream(relayed, p, pids...)
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
		return h.NewStream(relayed, p, pids...) // direct, where the dial got through
	}
	s, err := h.NewStream(network.WithDialPeerTimeout(ctx, directWait), p, pids...)
	if err == nil || ctx.Err() != nil || h.Network().Connectedness(p) != network.Limited {
		return s, err
	}
	ph.punchFailed(p)
	return h.NewStream(relayed, p, pids...)
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
	defer close(s.lanGone)
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
			s.noteLAN(e.(event.EvtPeerIdentificationCompleted))
		case done := <-s.lanSync:
			for queued := true; queued; {
				select {
				case e, ok := <-sub.Out():
					if !ok {
						close(done)
						return
					}
					s.noteLAN(e.(event.EvtPeerIdentificationCompleted))
				default:
					queued = false
				}
			}
			close(done)
		}
	}
}

// syncLAN waits until watchLAN has read every identification queued for
// it. Identify emits its event before the wait on it ends (h.Connect
// waits for it), so after syncLAN the private addresses of a peer just
// connected through a relay are known: a stream opened at once takes the
// direct connection, not the relay, however late the event bus would
// have handed watchLAN the event.
func (s *punchState) syncLAN(ctx context.Context) {
	done := make(chan struct{})
	select {
	case s.lanSync <- done:
	case <-s.lanGone:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// noteLAN keeps the private addresses of a peer identified over a
// relayed connection (watchLAN).
func (s *punchState) noteLAN(ev event.EvtPeerIdentificationCompleted) {
	if ev.Conn == nil || !ev.Conn.Stat().Limited {
		return
	}
	var private []ma.Multiaddr
	for _, a := range ev.ListenAddrs {
		if len(private) < lanAddrsMax && !IsRelayed(a) && manet.IsPrivateAddr(a) {
			private = append(private, a)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(private) == 0 {
		delete(s.lan, ev.Peer)
		return
	}
	if _, ok := s.lan[ev.Peer]; !ok && len(s.lan) >= lanMax {
		for q := range s.lan { // any one: a bound, not a cache
			delete(s.lan, q)
			break
		}
	}
	s.lan[ev.Peer] = private
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
	s.syncLAN(ctx)
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

// punchFilterMax bounds the peers a oneTransport remembers between the
// two halves of a hole punch.
const punchFilterMax = 1024

// oneTransport is hole punching's address filter: where both ends have a
// public QUIC address, both dial QUIC alone.
//
// Each end of a hole punch dials every address the other sent it, and
// libp2p ends that dial (cancels its context) the moment one connection
// is up, whichever end dialled it. Over TCP and QUIC at once, the two
// ends may each get a different transport's connection first and each
// cancel, mid-handshake, the one the other end has just finished: both
// direct connections die, and the stream waits out directWait for the
// relay. Over QUIC alone there is one connection (one end dials, the
// other only sends packets to open its NAT), which both keep.
//
// The choice is the same at both ends: each dials QUIC alone when the
// addresses it sent held a QUIC one and the addresses it received do
// too. A peer without the filter dials all it receives, as libp2p does.
type oneTransport struct {
	mu   sync.Mutex
	sent map[peer.ID]bool // whether what this end sent the peer held a QUIC address
}

func newOneTransport() *oneTransport { return &oneTransport{sent: map[peer.ID]bool{}} }

// FilterLocal sends the peer every address, and notes whether one was
// QUIC. Both roles of a hole punch send theirs before they filter the
// peer's.
func (f *oneTransport) FilterLocal(p peer.ID, addrs []ma.Multiaddr) []ma.Multiaddr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sent) >= punchFilterMax {
		clear(f.sent) // punches that ended before the peer answered
	}
	f.sent[p] = slices.ContainsFunc(addrs, IsQUIC)
	return addrs
}

// FilterRemote keeps the peer's QUIC addresses alone where both ends
// sent one; otherwise every address.
func (f *oneTransport) FilterRemote(p peer.ID, addrs []ma.Multiaddr) []ma.Multiaddr {
	f.mu.Lock()
	sentQUIC := f.sent[p]
	delete(f.sent, p)
	f.mu.Unlock()
	if !sentQUIC || !slices.ContainsFunc(addrs, IsQUIC) {
		return addrs
	}
	return slices.DeleteFunc(slices.Clone(addrs), func(a ma.Multiaddr) bool { return !IsQUIC(a) })
}
