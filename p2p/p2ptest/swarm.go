package p2ptest

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

// DefaultSwarmName names the public swarm every harness node joins unless
// WithSwarm says otherwise.
const DefaultSwarmName = "test"

// Discovery timings of harness nodes: short, so that a swarm of tens of
// nodes finds itself in seconds rather than the daemon's minutes.
const (
	findInterval        = 2 * time.Second
	rebootstrapInterval = 5 * time.Second
	dialTimeout         = 15 * time.Second // the daemon's default: a bootstrap peer a thousand nodes dial is slow to identify
)

// Node is one idlegrid p2p stack in a test swarm.
type Node struct {
	// Host is a mocknet host or, on loopback, one from p2p.NewHost.
	Host host.Host
	// Discovery runs kad-dht in server mode and the swarm's rendezvous.
	Discovery *p2p.Discovery
	// Gossip is joined and subscribed to every topic in p2p.TopicKinds.
	Gossip *p2p.Gossip
	// With WithLocality: the node's coordinate, its pinger and the keeper
	// of its near and random peers; nil without.
	Coords *p2p.Coordinates
	Pinger *p2p.Pinger
	Keeper *p2p.Keeper
	// Traffic counts the node's stream bytes (WithTraffic); nil without.
	Traffic *Traffic
	// Shards are the shards the node follows (WithShards); nil: the
	// kinds' own topics.
	Shards []string

	index int // its place in Nodes when it started

	ctx         context.Context // its routers' and loops' lifetime
	cancel      context.CancelFunc
	drainCtx    context.Context // its harness subscriptions' and keeper's
	drainCancel context.CancelFunc
	drains      sync.WaitGroup
}

// Swarm is N nodes that bootstrap from node 0, run kad-dht in server mode
// and are subscribed to every topic in p2p.TopicKinds. Its constructors
// register Close with t.Cleanup.
type Swarm struct {
	// Nodes are the nodes in the swarm now: Leave takes one out, Join
	// adds one at the end.
	Nodes []*Node
	// DeliverBytes pads each message Deliver publishes to this many
	// bytes (0: as short as its text), so that a delivery's traffic is
	// that of a message of that size.
	DeliverBytes int

	cfg   config
	mn    mocknet.Mocknet // nil on loopback
	sw    *sweeper        // mocknet's streams that outlive their connections
	links *links          // mocknet's links
	rows  int             // matrix rows taken, by nodes that left too

	ctx    context.Context // the routers' and discovery loops' lifetime
	cancel context.CancelFunc
	// drainCtx ends the goroutines that drain the harness's own
	// subscriptions; they stop before the topics are closed.
	drainCtx    context.Context
	drainCancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

// Option changes how a swarm is built.
type Option func(*config)

type config struct {
	swarm  p2p.Swarm
	matrix Matrix
	offset int
	logger *slog.Logger

	low, high     int           // connection manager; 0: 100 and 400, no Want
	grace         time.Duration // connection manager's grace period
	find, settled time.Duration // discovery intervals; 0: findInterval, the default
	ping          time.Duration // WithLocality's ping interval; 0: no locality
	near, random  int
	pingAll       bool // WithLocality's pinger samples every peer every round
	traffic       bool
	quicOnly      bool
	lazy          bool                 // WithLazyLinks
	follow        func(i int) []string // WithShards
}

// WithQUIC has NewLoopback's hosts of a public swarm listen on QUIC
// alone, so that every connection is QUIC. Hosts that listen on both
// dial QUIC first and TCP a moment later, and on a loaded machine the
// TCP dial may win: a test about QUIC asks for it.
func WithQUIC() Option { return func(c *config) { c.quicOnly = true } }

// WithLatency maps node i to row offset+i of m and gives every mocknet link
// the RTT of its two rows (the mean of both directions where m is not
// symmetric), so that a ping between two nodes measures their RTT in m.
// It applies to NewMocknet only. For more nodes than m has rows, pass
// m.Expand(n, jitter, seed).
func WithLatency(m Matrix, offset int) Option {
	return func(c *config) { c.matrix, c.offset = m, offset }
}

// WithSwarm puts the nodes in swarm s instead of the public swarm
// DefaultSwarmName. On loopback a private swarm runs on TCP only, with its
// PSK; mocknet has no PSK and ignores it.
func WithSwarm(s p2p.Swarm) Option {
	return func(c *config) { c.swarm = s }
}

// WithBounds gives every node a connection manager with water marks low
// and high and the given grace period (on mocknet, a real one in place of
// mocknet's none, and node 0, every node's bootstrap peer, at 500/2000 as
// a daemon's bootstrap profile), and has its discovery seek low
// connections (Want).
// Without it, loopback hosts have water marks 100 and 400, mocknet hosts
// no connection manager, and discovery dials every peer it finds.
func WithBounds(low, high int, grace time.Duration) Option {
	return func(c *config) { c.low, c.high, c.grace = low, high, grace }
}

// The bootstrap node's water marks under WithBounds: those of a daemon's
// bootstrap profile, which every joining node dials first.
const bootstrapLow, bootstrapHigh = 500, 2000

// WithIntervals sets discovery's FindInterval and SettledInterval.
func WithIntervals(find, settled time.Duration) Option {
	return func(c *config) { c.find, c.settled = find, settled }
}

// WithLocality has every node keep a network coordinate as a daemon does
// (the coordinate exchange, a Pinger with that interval), a Keeper
// refreshed after every interval protecting near peers of least RTT and
// random others, and rank what discovery finds by Coordinates.Nearness.
func WithLocality(ping time.Duration, near, random int) Option {
	return func(c *config) { c.ping, c.near, c.random = ping, near, random }
}

// WithPingEveryRound has WithLocality's pingers sample every connected
// peer every interval (Pinger.SettledEvery 1), as before the pinger eased
// off settled peers: the reference its traffic is measured against.
func WithPingEveryRound() Option { return func(c *config) { c.pingAll = true } }

// WithLazyLinks links two mocknet nodes when one first dials the other
// (through its host's Connect or NewStream) instead of linking every pair
// up front: a swarm of n nodes then holds a link per pair that ever
// dialled, not n²/2 made before it starts. Links are never removed, and a
// dial makes one again, so Mocknet().UnlinkPeers does not partition such
// a swarm.
func WithLazyLinks() Option { return func(c *config) { c.lazy = true } }

// WithTraffic counts each node's stream bytes in Node.Traffic.
func WithTraffic() Option { return func(c *config) { c.traffic = true } }

// WithLogger sends the discovery and gossip logs of every node to l.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

func newConfig(t testing.TB, n int, opts []Option) config {
	t.Helper()
	cfg := config{swarm: p2p.Swarm{Name: DefaultSwarmName}}
	for _, o := range opts {
		o(&cfg)
	}
	if n < 1 {
		t.Fatalf("p2ptest: a swarm needs at least 1 node, got %d", n)
	}
	if err := p2p.ValidateSwarmName(cfg.swarm.Name); err != nil {
		t.Fatalf("p2ptest: %v", err)
	}
	if cfg.matrix != nil && (cfg.offset < 0 || cfg.offset+n > len(cfg.matrix)) {
		t.Fatalf("p2ptest: latency rows %d..%d are outside the %d-row matrix", cfg.offset, cfg.offset+n-1, len(cfg.matrix))
	}
	return cfg
}

func newSwarm(cfg config) *Swarm {
	s := &Swarm{cfg: cfg}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.drainCtx, s.drainCancel = context.WithCancel(s.ctx)
	return s
}

// NewMocknet builds a swarm of n nodes on mocknet: every pair is linked
// (with WithLatency, at the matrix's RTT), node 0 is every other node's
// only bootstrap peer, and each node runs libp2p ping, kad-dht discovery
// and gossipsub. Connections open instantly; there is no PSK or gater.
func NewMocknet(t testing.TB, n int, opts ...Option) *Swarm {
	t.Helper()
	s := newSwarm(newConfig(t, n, opts))
	s.mn, s.sw = mocknet.New(), newSweeper()
	s.links = &links{mn: s.mn, cfg: &s.cfg, index: map[peer.ID]int{}, made: map[[2]int]bool{}}
	t.Cleanup(s.cleanup(t))
	for i := range n {
		nd, err := s.newMockNode()
		if err != nil {
			t.Fatalf("p2ptest: mocknet node %d: %v", i, err)
		}
		s.Nodes = append(s.Nodes, nd)
	}
	if !s.cfg.lazy {
		if err := s.link(); err != nil {
			t.Fatalf("p2ptest: %v", err)
		}
	}
	s.start(t)
	return s
}

// newMockNode adds a host at the matrix's next row and wraps it.
func (s *Swarm) newMockNode() (*Node, error) {
	i := s.rows
	if m := s.cfg.matrix; m != nil && s.cfg.offset+i >= len(m) {
		return nil, fmt.Errorf("no latency row for node %d: the matrix has %d rows from %d", i, len(m), s.cfg.offset)
	}
	h, err := newMockHost(s.mn, i)
	if err != nil {
		return nil, err
	}
	s.rows++
	ping.NewPingService(h) // p2p.NewHost enables ping; mocknet hosts need it added
	s.sw.watch(h.Network())
	s.links.add(h.ID(), i)
	return s.cfg.wrap(h, i == 0, s.links)
}

// wrap makes a mocknet host a harness node: with WithBounds, with a real
// connection manager, bound as p2p.NewHost binds its own (the bootstrap
// node's at bootstrapLow/bootstrapHigh, as a daemon's bootstrap profile);
// with WithTraffic, with its streams counted; with WithLazyLinks, linked
// to a peer as it first dials it.
func (c config) wrap(h host.Host, bootstrap bool, l *links) (*Node, error) {
	nd := &Node{Host: h}
	if c.low == 0 && !c.traffic && !c.lazy {
		return nd, nil
	}
	w := &wrappedHost{Host: h}
	if c.lazy {
		w.link = l.link
	}
	if c.low > 0 {
		low, high := c.low, c.high
		if bootstrap {
			low, high = max(low, bootstrapLow), max(high, bootstrapHigh)
		}
		cm, err := connmgr.NewConnManager(low, high, connmgr.WithGracePeriod(c.grace), connmgr.WithSilencePeriod(time.Second))
		if err != nil {
			return nil, fmt.Errorf("connection manager: %w", err)
		}
		h.Network().Notify(cm.Notifee())
		w.Host, w.cm = p2p.BoundHost(h, cm, p2p.Bound{High: high, Grace: c.grace}), cm // as p2p.NewHost's hosts
	}
	if c.traffic {
		nd.Traffic = new(Traffic)
		w.traffic = nd.Traffic
	}
	nd.Host = w
	return nd, nil
}

// newMockHost adds node i to mn at MockAddr(i). No packet leaves the
// process: mocknet links are in memory.
func newMockHost(mn mocknet.Mocknet, i int) (host.Host, error) {
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return mn.AddPeer(key, MockAddr(i))
}

// MockAddr is mocknet node i's own IPv4 address in 198.18.0.0/15 (the
// range set aside for network tests; 198.18.0.1 onwards), so each node
// looks like a machine of its own as in a real swarm (mocknet's GenPeer
// puts every peer in one IPv6 /64).
func MockAddr(i int) ma.Multiaddr {
	k := i + 1
	return ma.StringCast(fmt.Sprintf("/ip4/198.%d.%d.%d/tcp/4001", 18+(k>>16), (k>>8)&0xff, k&0xff))
}

// link joins every pair of mocknet nodes, at the matrix's one-way delays.
func (s *Swarm) link() error {
	for i, a := range s.Nodes {
		for j := i + 1; j < len(s.Nodes); j++ {
			if err := s.links.join(i, j, a.Host.ID(), s.Nodes[j].Host.ID()); err != nil {
				return err
			}
		}
	}
	return nil
}

// links makes the mocknet links of a swarm, each pair's once.
type links struct {
	mn  mocknet.Mocknet
	cfg *config

	mu    sync.Mutex
	index map[peer.ID]int // matrix row of each host, under mu
	made  map[[2]int]bool // under mu, with WithLazyLinks
}

// add records host a at row i.
func (l *links) add(a peer.ID, i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index[a] = i
}

// join links nodes i and j (hosts a and b) at the matrix's one-way delay.
func (l *links) join(i, j int, a, b peer.ID) error {
	k, err := l.mn.LinkPeers(a, b)
	if err != nil {
		return fmt.Errorf("link nodes %d and %d: %w", i, j, err)
	}
	if m := l.cfg.matrix; m != nil {
		k.SetOptions(mocknet.LinkOptions{Latency: m.OneWay(l.cfg.offset+i, l.cfg.offset+j)})
	}
	return nil
}

// link links a to b unless they are linked already (WithLazyLinks). A
// peer outside the swarm is left to fail its dial.
func (l *links) link(a, b peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, oki := l.index[a]
	j, okj := l.index[b]
	if !oki || !okj || i == j {
		return
	}
	key := [2]int{min(i, j), max(i, j)}
	if l.made[key] {
		return
	}
	if l.join(i, j, a, b) == nil {
		l.made[key] = true
	}
}

// startProgress is the size of a swarm from which start logs its
// progress, every tenth of the nodes.
const startProgress = 300

// start runs gossip and then discovery on every node, in order: node 0
// first, so that it is up before the others dial it. A large swarm logs
// its progress.
func (s *Swarm) start(t testing.TB) {
	t.Helper()
	h0 := s.Nodes[0].Host
	boot := []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Network().ListenAddresses()}}
	began, said := time.Now(), 0
	for i, nd := range s.Nodes {
		if len(s.Nodes) >= startProgress && i*10/len(s.Nodes) > said {
			said = i * 10 / len(s.Nodes)
			t.Logf("p2ptest: %d of %d nodes started, %v after the first%s", i, len(s.Nodes), time.Since(began).Round(time.Millisecond), residentSet())
		}
		var bootstrap []peer.AddrInfo
		if i > 0 {
			bootstrap = boot
		}
		nd.index = i
		if err := s.startNode(nd, bootstrap); err != nil {
			t.Fatalf("p2ptest: start node %d: %v", i, err)
		}
	}
}

// ResidentSet is the process's resident set in bytes (VmRSS in
// /proc/self/status, Linux).
func ResidentSet() (int64, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}

// residentSet is ", RSS" and ResidentSet in GB of the kilobytes /proc
// counts; empty where it cannot be read.
func residentSet() string {
	b, err := ResidentSet()
	if err != nil {
		return ""
	}
	return fmt.Sprintf(", RSS %.1f GB", float64(b>>10)/1e6)
}

// startNode joins the swarm's topics and subscribes to each (gossipsub
// grafts only subscribers into a mesh), then dials the bootstrap peers and
// starts discovery.
func (s *Swarm) startNode(nd *Node, bootstrap []peer.AddrInfo) error {
	nd.ctx, nd.cancel = context.WithCancel(s.ctx)
	nd.drainCtx, nd.drainCancel = context.WithCancel(s.drainCtx)
	g, err := p2p.NewGossip(nd.ctx, nd.Host, p2p.GossipConfig{
		Swarm:            s.cfg.swarm,
		OutboundQueue:    1024,
		MaxMessageSize:   1 << 20,
		PeerScoring:      true,
		ValidatorTimeout: 2 * time.Second,
		Logger:           s.cfg.logger,
	})
	if err != nil {
		return err
	}
	nd.Gossip = g
	if err := s.subscribe(nd); err != nil {
		return err
	}
	var nearness func(peer.ID) (time.Duration, bool)
	if s.cfg.ping > 0 {
		s.keepLocality(nd)
		nearness = nd.Coords.Nearness
	}
	d, err := p2p.NewDiscovery(nd.Host, p2p.DiscoveryConfig{
		Swarm:               s.cfg.swarm,
		Server:              true,
		Bootstrap:           bootstrap,
		RebootstrapInterval: rebootstrapInterval,
		FindInterval:        cmp.Or(s.cfg.find, findInterval),
		SettledInterval:     s.cfg.settled,
		MaxPeers:            64,
		Want:                s.cfg.low,
		Nearness:            nearness,
		DialTimeout:         dialTimeout,
		Logger:              s.cfg.logger,
	})
	if err != nil {
		return err
	}
	nd.Discovery = d
	if err := d.ConnectBootstrap(nd.ctx); err != nil {
		return err
	}
	if err := d.Start(nd.ctx); err != nil {
		return err
	}
	return keepShards(nd)
}

// keepLocality starts nd's coordinate, pinger and keeper, which run until
// the swarm closes.
func (s *Swarm) keepLocality(nd *Node) {
	nd.Coords = p2p.NewCoordinates()
	p2p.ServeCoord(p2p.Server{Host: nd.Host, Swarm: s.cfg.swarm, Ctx: nd.ctx, Log: s.cfg.logger}, nd.Coords.Own)
	nd.Pinger = p2p.NewPinger(nd.Host, s.cfg.ping, s.cfg.logger)
	nd.Pinger.Track(nd.Coords, s.cfg.swarm)
	if s.cfg.pingAll {
		nd.Pinger.SettledEvery = 1
	}
	nd.Keeper = p2p.NewKeeper(nd.Host, nd.Coords.RTT, s.cfg.near, s.cfg.random)
	nd.Pinger.Start(nd.ctx)
	nd.drains.Add(1)
	go func() {
		defer nd.drains.Done()
		t := time.NewTicker(s.cfg.ping)
		defer t.Stop()
		for {
			select {
			case <-nd.drainCtx.Done(): // ends before the hosts close
				return
			case <-t.C:
				nd.Keeper.Refresh()
			}
		}
	}()
}

// drain reads a harness subscription of nd until Close or Leave, so that
// it never holds up the router; tests read messages through
// subscriptions of their own.
func (s *Swarm) drain(nd *Node, sub *pubsub.Subscription) {
	defer nd.drains.Done()
	defer sub.Cancel()
	for {
		if _, err := sub.Next(nd.drainCtx); err != nil {
			return
		}
	}
}

// Mocknet returns the mocknet of a NewMocknet swarm, to unlink or
// disconnect peers; nil on loopback.
func (s *Swarm) Mocknet() mocknet.Mocknet { return s.mn }

// Swarm is the swarm the nodes are of (WithSwarm).
func (s *Swarm) Swarm() p2p.Swarm { return s.cfg.swarm }

// Close stops every node and waits: the harness's subscriptions, then each
// node's topics, routers and discovery, then the hosts and the mocknet. It
// is safe to call more than once and returns the first call's errors.
func (s *Swarm) Close() error {
	s.closeOnce.Do(func() {
		s.drainCancel()
		for _, nd := range s.Nodes { // those that left have stopped
			nd.drains.Wait()
		}
		var errs []error
		for i, nd := range s.Nodes {
			if nd.Gossip == nil {
				continue
			}
			if err := nd.Gossip.Close(); err != nil {
				errs = append(errs, fmt.Errorf("node %d: gossip: %w", i, err))
			}
		}
		s.cancel()
		nodeErrs := make([]error, len(s.Nodes))
		var wg sync.WaitGroup
		for i, nd := range s.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := nd.close(); err != nil {
					nodeErrs[i] = fmt.Errorf("node %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		errs = append(errs, nodeErrs...)
		if s.mn != nil {
			errs = append(errs, s.mn.Close())
			s.sw.sweep()
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

func (nd *Node) close() error {
	var errs []error
	if nd.Pinger != nil {
		nd.Pinger.Close()
	}
	if nd.Discovery != nil {
		if err := nd.Discovery.Close(); err != nil {
			errs = append(errs, fmt.Errorf("discovery: %w", err))
		}
	}
	if err := nd.Host.Close(); err != nil {
		errs = append(errs, fmt.Errorf("host: %w", err))
	}
	return errors.Join(errs...)
}

// cleanup closes the swarm at the end of the test and fails the test if
// tearing down failed.
func (s *Swarm) cleanup(t testing.TB) func() {
	return func() {
		if err := s.Close(); err != nil {
			t.Errorf("p2ptest: close swarm: %v", err)
		}
	}
}
