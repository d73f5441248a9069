package p2p

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	ds "github.com/ipfs/go-datastore"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// DiscoveryConfig configures the DHT and rendezvous discovery of one swarm.
type DiscoveryConfig struct {
	Swarm Swarm
	// Server runs the DHT in server mode (a daemon); false is client mode
	// (a light client that queries but stores and answers nothing).
	Server bool
	// Bootstrap peers are dialled first and again when they drop while
	// the node holds fewer than Want connections.
	Bootstrap []peer.AddrInfo
	// Datastore holds the DHT's records; nil keeps them in memory.
	Datastore ds.Batching
	// RebootstrapInterval is how often lost bootstrap peers are redialled;
	// the routing table is refreshed then if one was, or if it is empty.
	RebootstrapInterval time.Duration
	// FindInterval is the longest wait between rendezvous lookups; the first
	// lookups come sooner (100 ms, doubling) so a new node joins quickly.
	FindInterval time.Duration
	// SettledInterval is the longest wait between lookups while the node
	// holds Want connections (default 15 × FindInterval): a node with its
	// bounded set looks only now and then, for nearer peers and new ones.
	SettledInterval time.Duration
	// MaxPeers caps how many rendezvous peers one lookup returns.
	MaxPeers int
	// Want is the number of connections the node seeks (the connection
	// manager's low water mark): a lookup dials, nearest first, only as
	// many peers as the node lacks, and once it holds Want it looks
	// seldom. 0 dials every peer found, every FindInterval.
	Want int
	// Nearness ranks the peers a lookup finds: the RTT measured or
	// estimated to each, false for unknown. Known peers are dialled first,
	// nearest first; unknown ones follow in random order. nil: all unknown.
	Nearness func(peer.ID) (time.Duration, bool)
	// DialTimeout bounds each dial to a bootstrap or rendezvous peer.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Discovery finds the peers of a swarm: kad-dht under the swarm's protocol
// prefix, and a rendezvous record under the swarm's namespace, so that two
// peers that share only one bootstrap peer find each other.
type Discovery struct {
	h   host.Host
	cfg DiscoveryConfig
	log *slog.Logger
	dht *dht.IpfsDHT
	rd  *drouting.RoutingDiscovery

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	dialed    map[peer.ID]time.Time // rendezvous dials of the last SettledInterval
	ctx       context.Context       // the loops'; set by Start
	closed    bool
	kept      map[string]bool             // shards KeepShard keeps
	protected map[string]map[peer.ID]bool // by shard: the followers protected (protectShard)
}

// Defaults of DiscoveryConfig's optional fields.
const (
	DefaultRebootstrapInterval = 5 * time.Minute
	DefaultFindInterval        = time.Minute
	DefaultMaxPeers            = 64
	DefaultDialTimeout         = 15 * time.Second
)

// refreshPeriod is kad-dht's routing table refresh period, which each
// node jitters.
const refreshPeriod = 10 * time.Minute

// withDefaults fills each zero optional field with its default.
func (c DiscoveryConfig) withDefaults() DiscoveryConfig {
	if c.RebootstrapInterval <= 0 {
		c.RebootstrapInterval = DefaultRebootstrapInterval
	}
	if c.FindInterval <= 0 {
		c.FindInterval = DefaultFindInterval
	}
	if c.SettledInterval < c.FindInterval {
		c.SettledInterval = 15 * c.FindInterval
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.Nearness == nil {
		c.Nearness = func(peer.ID) (time.Duration, bool) { return 0, false }
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// NewDiscovery builds the DHT on h. It dials nothing: call Start. Zero
// durations and counts in cfg take the Default… values.
func NewDiscovery(h host.Host, cfg DiscoveryConfig) (*Discovery, error) {
	cfg = cfg.withDefaults()
	mode := dht.ModeClient
	if cfg.Server {
		mode = dht.ModeServer
	}
	opts := []dht.Option{
		dht.ProtocolPrefix(cfg.Swarm.DHTPrefix()),
		dht.Mode(mode),
		dht.BootstrapPeers(cfg.Bootstrap...),
		// kad-dht refreshes its table every 10 minutes from its start, a
		// lookup per bucket that dials dozens of peers. Nodes started
		// together (a rack rebooted, a swarm simulated) would refresh
		// together and crowd each other past their connection bound at
		// once: each takes its own period, 10 minutes ±25%.
		dht.RoutingTableRefreshPeriod(time.Duration(float64(refreshPeriod) * (0.75 + 0.5*mrand.Float64()))),
	}
	if cfg.Datastore != nil {
		opts = append(opts, dht.Datastore(cfg.Datastore))
	}
	kad, err := dht.New(h, opts...)
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	return &Discovery{h: h, cfg: cfg, log: cfg.Logger, dht: kad, rd: drouting.NewRoutingDiscovery(kad), dialed: map[peer.ID]time.Time{}, kept: map[string]bool{}, protected: map[string]map[peer.ID]bool{}}, nil
}

// Locate makes sure the host has addresses for p, asking the DHT when
// the peerstore has none (a renter may know a provider only from its
// offer, which a third peer relayed).
func (d *Discovery) Locate(ctx context.Context, p peer.ID) error {
	if len(d.h.Peerstore().Addrs(p)) > 0 {
		return nil
	}
	return d.Relocate(ctx, p)
}

// Relocate asks the DHT for p's addresses even when the peerstore has
// some: they may be stale (a provider restarted on another port).
func (d *Discovery) Relocate(ctx context.Context, p peer.ID) error {
	ai, err := d.dht.FindPeer(ctx, p)
	if err != nil {
		return fmt.Errorf("find %s: %w", p, err)
	}
	d.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
	return nil
}

// DHT returns the underlying kad-dht.
func (d *Discovery) DHT() *dht.IpfsDHT { return d.dht }

// ConnectBootstrap dials the configured bootstrap peers; see ConnectPeers.
func (d *Discovery) ConnectBootstrap(ctx context.Context) error {
	return ConnectPeers(ctx, d.h, d.cfg.Bootstrap, d.cfg.DialTimeout, d.log)
}

// ConnectPeers dials every peer at once, each within timeout, and waits
// for all of them. It fails with ErrNoBootstrap, naming each peer's error
// on one line, only when peers is non-empty and none answered; it logs the
// ones that failed when others answered.
func ConnectPeers(ctx context.Context, h host.Host, peers []peer.AddrInfo, timeout time.Duration, log *slog.Logger) error {
	if len(peers) == 0 {
		return nil
	}
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, ai := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = connectConfirmed(ctx, h, ai)
		}()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed = append(failed, fmt.Sprintf("%s: %v", peers[i].ID, oneLine(err)))
	}
	if len(failed) == len(peers) {
		return fmt.Errorf("%w (%s)", ErrNoBootstrap, strings.Join(failed, "; "))
	}
	for _, f := range failed {
		log.Warn("bootstrap peer unreachable", "err", f)
	}
	return nil
}

func (d *Discovery) connect(ctx context.Context, ai peer.AddrInfo) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	defer cancel()
	return d.h.Connect(ctx, ai)
}

// Start bootstraps the DHT and runs the re-bootstrap, advertise and find
// loops until Close.
func (d *Discovery) Start(ctx context.Context) error {
	ctx, d.cancel = context.WithCancel(ctx)
	d.mu.Lock()
	d.ctx = ctx
	d.mu.Unlock()
	if err := d.dht.Bootstrap(ctx); err != nil {
		return fmt.Errorf("dht bootstrap: %w", err)
	}
	d.wg.Add(2)
	go d.rebootstrapLoop(ctx)
	go d.rendezvousLoop(ctx)
	return nil
}

// Close stops the loops and the DHT and waits for them.
func (d *Discovery) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	return d.dht.Close()
}

// rejoinFirst is how soon a node that holds no peer dials its bootstrap
// peers again; it doubles up to RebootstrapInterval.
const rejoinFirst = time.Second

func (d *Discovery) rebootstrapLoop(ctx context.Context) {
	defer d.wg.Done()
	wait := d.cfg.RebootstrapInterval
	if d.alone() {
		wait = rejoinFirst
	}
	last := time.Duration(0) // the wait before this round
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		last, wait = wait, d.cfg.RebootstrapInterval
		// A node that holds the connections it wants needs no way in: a
		// bootstrap peer that trimmed it is not dialled again (a swarm of
		// bounded nodes would otherwise crowd its bootstrap peers).
		if d.settled() && d.dht.RoutingTable().Size() > 0 {
			continue
		}
		redialled, alone := false, d.alone()
		for _, ai := range d.cfg.Bootstrap {
			if d.h.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			if err := d.connect(ctx, ai); err != nil {
				d.log.Debug("re-bootstrap dial failed", "peer", ai.ID, "err", err)
			} else {
				redialled = true
			}
		}
		// kad-dht refreshes its table on its own schedule (every 10
		// minutes); an extra refresh, a lookup per bucket, pays only after
		// the node lost its way into the swarm.
		if redialled || d.dht.RoutingTable().Size() == 0 {
			d.dht.RefreshRoutingTable()
		}
		if redialled && alone {
			d.log.Info("reached a bootstrap peer; joining the swarm")
		} else if !redialled && d.alone() {
			// Cut off (its bootstrap peers down, or not yet up): dial
			// again soon, backing off, with jitter so that the nodes a
			// restarted bootstrap peer serves do not dial it together.
			wait = max(rejoinFirst, min(d.cfg.RebootstrapInterval, time.Duration(float64(2*last)*(0.9+0.2*mrand.Float64()))))
			d.log.Info("no bootstrap peer reachable; dialling again", "in", wait.Round(time.Second))
		}
	}
}

// alone reports whether the node is cut off from the swarm: it has
// bootstrap peers and is connected to no peer at all.
func (d *Discovery) alone() bool {
	return len(d.cfg.Bootstrap) > 0 && len(d.h.Network().Peers()) == 0
}

// rendezvousLoop advertises the node in its rendezvous shard and looks
// the swarm up, quickly at first and then every FindInterval, or every
// SettledInterval while the node holds Want connections (±25%),
// re-advertising before the record's TTL runs out.
func (d *Discovery) rendezvousLoop(ctx context.Context) {
	defer d.wg.Done()
	ns := d.cfg.Swarm.Rendezvous(RendezvousShard(d.h.ID()))
	wait := 100 * time.Millisecond
	var readvertiseAt time.Time
	for {
		if d.cfg.Server && time.Now().After(readvertiseAt) && d.dht.RoutingTable().Size() > 0 {
			ttl, err := d.rd.Advertise(ctx, ns)
			if err != nil {
				d.log.Debug("rendezvous advertise failed", "ns", ns, "err", err)
			} else {
				readvertiseAt = time.Now().Add(ttl * 7 / 8)
			}
		}
		if d.dht.RoutingTable().Size() > 0 {
			d.findPeers(ctx)
		}
		wait = min(2*wait, d.cfg.FindInterval)
		if d.settled() {
			// Each lookup dials the peers on the way to the record, which
			// the connection manager then trims: a node with its set
			// looks seldom, at a jittered time (nodes that settled together
			// must not look together).
			wait = time.Duration(float64(d.cfg.SettledInterval) * (0.75 + 0.5*mrand.Float64()))
		}
		if d.cfg.Server && !readvertiseAt.IsZero() {
			wait = min(wait, max(time.Until(readvertiseAt), time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// settled reports whether the node holds the connections it wants.
func (d *Discovery) settled() bool {
	return d.cfg.Want > 0 && len(d.h.Network().Peers()) >= d.cfg.Want
}

// rendezvousEnough bounds how many peers a lookup seeks before it stops
// looking up further shards: twice what the node lacks of Want, at least
// rendezvousLeast (a node that holds its set looks for nearer peers).
const rendezvousEnough, rendezvousLeast = 16, 4

// FindSwarmPeers looks up the swarm's rendezvous shards in random order
// until it has found enough peers other than this one (all it can, up to
// MaxPeers, for a node without Want; otherwise twice what it lacks of
// Want, between rendezvousLeast and rendezvousEnough), or looked in every
// shard. In a large swarm one shard is enough; a small one takes a few
// lookups, each cheap.
func (d *Discovery) FindSwarmPeers(ctx context.Context) ([]peer.AddrInfo, error) {
	enough := d.cfg.MaxPeers
	if d.cfg.Want > 0 {
		lack := d.cfg.Want - len(d.h.Network().Peers())
		enough = min(d.cfg.MaxPeers, max(rendezvousLeast, min(rendezvousEnough, 2*lack)))
	}
	var out []peer.AddrInfo
	seen := map[peer.ID]bool{d.h.ID(): true}
	var errs []error
	for _, i := range mrand.Perm(RendezvousShards) {
		if len(out) >= enough || ctx.Err() != nil {
			break
		}
		found, err := d.rd.FindPeers(ctx, d.cfg.Swarm.Rendezvous(i), discovery.Limit(d.cfg.MaxPeers-len(out)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for ai := range found {
			if !seen[ai.ID] && len(out) < d.cfg.MaxPeers {
				seen[ai.ID] = true
				out = append(out, ai)
			}
		}
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("rendezvous lookup: %w", errors.Join(errs...))
	}
	return out, nil
}

func (d *Discovery) findPeers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.FindInterval)
	defer cancel()
	found, err := d.FindSwarmPeers(ctx)
	if err != nil {
		d.log.Debug("rendezvous lookup failed", "err", err)
		return
	}
	var fresh []peer.AddrInfo
	for _, ai := range found {
		if len(ai.Addrs) > 0 && d.h.Network().Connectedness(ai.ID) != network.Connected {
			fresh = append(fresh, ai)
		}
	}
	fresh = d.rank(fresh)
	if d.cfg.Want > 0 {
		fresh = d.worthDialling(fresh)
	}
	d.noteDialled(fresh, time.Now())
	var wg sync.WaitGroup
	for _, ai := range fresh {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.connect(ctx, ai); err != nil {
				d.log.Debug("rendezvous dial failed", "peer", ai.ID, "err", err)
			}
		}()
	}
	wg.Wait()
}

// improveDials is how many peers nearer than most of its connections a
// node that holds its set dials from one lookup; the connection manager
// trims as many of the least valued.
const improveDials = 2

// worthDialling is what to dial of ranked: as many as the node lacks of
// Want, and then up to improveDials more that are known to be nearer than
// the median of its connected peers of known RTT. A peer dialled in the
// last SettledInterval and no longer connected (it left, or trimmed us:
// many nodes find the same peer near, and it keeps only its bound) comes
// after every other for what the node lacks, and never as an improvement.
func (d *Discovery) worthDialling(ranked []peer.AddrInfo) []peer.AddrInfo {
	conns := d.h.Network().Peers()
	need := max(0, d.cfg.Want-len(conns))
	if need >= len(ranked) {
		return ranked
	}
	ranked, again := d.splitDialled(ranked, time.Now())
	if need >= len(ranked) {
		return append(ranked, again[:need-len(ranked)]...)
	}
	var known []time.Duration
	for _, p := range conns {
		if rtt, ok := d.cfg.Nearness(p); ok {
			known = append(known, rtt)
		}
	}
	out := ranked[:need]
	if len(known) == 0 {
		return out
	}
	slices.Sort(known)
	median := known[len(known)/2]
	for _, ai := range ranked[need:min(len(ranked), need+improveDials)] {
		if rtt, ok := d.cfg.Nearness(ai.ID); ok && rtt < median {
			out = append(out, ai)
		}
	}
	return out
}

// noteDialled records that peers are being dialled at now, forgetting the
// dials older than SettledInterval once the record holds dialledKept.
func (d *Discovery) noteDialled(peers []peer.AddrInfo, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.dialed)+len(peers) > dialledKept {
		for p, at := range d.dialed {
			if now.Sub(at) >= d.cfg.SettledInterval {
				delete(d.dialed, p)
			}
		}
	}
	for _, ai := range peers {
		if len(d.dialed) < dialledKept {
			d.dialed[ai.ID] = now
		}
	}
}

// dialledKept bounds the record of recent rendezvous dials.
const dialledKept = 4096

// splitDialled splits ranked, keeping the order, into the peers not
// dialled in the last SettledInterval and those that were.
func (d *Discovery) splitDialled(ranked []peer.AddrInfo, now time.Time) (fresh, again []peer.AddrInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ai := range ranked {
		if at, ok := d.dialed[ai.ID]; ok && now.Sub(at) < d.cfg.SettledInterval {
			again = append(again, ai)
		} else {
			fresh = append(fresh, ai)
		}
	}
	return fresh, again
}

// rank orders peers nearest first by Nearness, the unknown after the
// known in random order (so that nodes that know nothing yet do not all
// dial the same peers).
func (d *Discovery) rank(peers []peer.AddrInfo) []peer.AddrInfo {
	type ranked struct {
		ai    peer.AddrInfo
		d     time.Duration
		known bool
	}
	rs := make([]ranked, len(peers))
	for i, ai := range peers {
		rtt, ok := d.cfg.Nearness(ai.ID)
		rs[i] = ranked{ai, rtt, ok}
	}
	mrand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	slices.SortStableFunc(rs, func(a, b ranked) int {
		switch {
		case a.known != b.known:
			if a.known {
				return -1
			}
			return 1
		case a.known:
			return cmp.Compare(a.d, b.d)
		}
		return 0
	})
	out := make([]peer.AddrInfo, len(rs))
	for i, r := range rs {
		out[i] = r.ai
	}
	return out
}

// connectConfirmed connects to ai and pings it once: a peer whose gater
// refuses us (an allow-list we are not on) lets the handshake finish on our
// side and then closes, so only a round trip proves the connection lives.
func connectConfirmed(ctx context.Context, h host.Host, ai peer.AddrInfo) error {
	if err := h.Connect(ctx, ai); err != nil {
		return err
	}
	if res := <-ping.Ping(ctx, h, ai.ID); res.Error != nil {
		// Either the peer went away in between, or its gater refused us.
		return fmt.Errorf("connected, but the connection closed at once (the peer stopped, or we are not on its swarm.allow_list): %w", res.Error)
	}
	return nil
}

// oneLine folds a multi-line error (libp2p's dial errors list every
// address) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
