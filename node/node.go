package node

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/geo"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/lease"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/provider"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/node/trust"
	"github.com/idlegrid/idlegrid/node/trustchain"
	"github.com/idlegrid/idlegrid/p2p"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Options are the parts of a node that come from the command line rather
// than the repository's config.
type Options struct {
	// Light runs the DHT in client mode whatever the config says.
	Light bool
	// Version is reported by the API and in identify's agent string.
	Version string
	// Logger is the base logger; nil uses slog.Default().
	Logger *slog.Logger
	// GPUSource, when set, replaces provider.gpu_source (tests drive a
	// fake through it).
	GPUSource attest.GPUSource
	// Settlement settles the receipts of ended leases; nil keeps the
	// local ledger in the datastore.
	Settlement Settlement
	// ProcessMetrics adds the Go runtime and process collectors to
	// /metrics; one process should add them once.
	ProcessMetrics bool
	// Clock is the time every component tells and waits by; nil is the
	// system clock (tests jump over long waits with a clock.Fake).
	Clock clock.Clock
	// Host, when set, makes the libp2p host from the node's identity in
	// place of network.listen, .announce, .conn_* and resources.* (which
	// p2p.NewHost would get): a simulation or a test puts nodes on mocknet
	// through it. The host must answer libp2p ping and, in a private swarm,
	// enforce the swarm's key and allow-list itself; the node closes it.
	Host func(identity crypto.PrivKey) (host.Host, error)
	// RetryBootstrap starts the node when no bootstrap peer answers (a
	// daemon, whose peers may come up after it): discovery keeps dialling
	// them, 1 s apart at first, doubling up to dht.rebootstrap_interval.
	// Without it Start fails with p2p.ErrNoBootstrap (a one-shot command
	// has nothing to wait for).
	RetryBootstrap bool
}

// Settlement settles the receipts of ended leases: a chain, a payment
// channel or a swarm's credit ledger could (see records.Settlement).
type Settlement = records.Settlement

// Node is one idlegrid peer for one process. It assembles the parts the
// config asks for (the libp2p host, discovery and gossip of package p2p,
// the datastore, and the market, renter, provider and lease components)
// and owns their lifecycle: New builds nothing that runs, Start starts the
// parts in one ordered list, and Close stops them in reverse. Its parts
// get narrow dependencies (a key, a small interface of the swarm, the
// store, a clock, a logger) and no pointer back to it.
type Node struct {
	// datasetAPI answers the dataset methods once the datastore is open.
	datasetAPI
	repo      *repo.Repo
	cfg       config.Config
	opts      Options
	log       *slog.Logger
	key       crypto.PrivKey
	id        peer.ID
	swarm     p2p.Swarm
	limits    market.Limits // the market's, for this swarm
	bootstrap []peer.AddrInfo
	allow     []peer.ID
	ccRoots   *x509.CertPool // nil: CC evidence is shown, not verified
	clock     clock.Clock

	// Set by Start, in order, and never changed after.
	started     time.Time
	base        context.Context // parent of every part's context
	handlers    p2p.Handlers    // every served stream's handler, waited for before the datastore closes
	metrics     *metrics.Metrics
	apiLn       net.Listener
	apiAddr     string
	host        host.Host
	conns       *connTracker
	reach       *p2p.ReachabilityWatch
	reloadMu    sync.Mutex
	reloaded    *config.Config // the configuration last reloaded; nil: cfg
	store       *pebbleds.Datastore
	disc        *p2p.Discovery
	gossip      *p2p.Gossip
	link        *swarm.Link
	market      *book.Market
	reputation  *trust.Reputation
	records     *trustchain.Keeper // this node's chain of lease records
	wallet      *pay.Wallet        // pays and is paid by channel (settlement evm); nil: not
	seeds       seedSet            // trust seeds, and where each came from
	challenger  *trust.Challenger
	relayVouch  swarm.RelayVouch // whom this node's relay reserves for
	renter      *renter.Renter
	provider    *provider.Provider // nil unless a provider
	rentals     rentals            // started through the API
	marketCache marketCache        // the dashboard's last market summary
	leases      *lease.Owner       // nil unless a provider
	pinger      *p2p.Pinger
	coords      *p2p.Coordinates // this node's network coordinate, from New on
	keeper      *p2p.Keeper      // the peers the connection manager keeps
	place       *geo.Place       // where this node is (network.location); nil: unknown
	running     bool             // Start succeeded

	stops     []namedStop // what Start started, for Close to unwind
	closeOnce sync.Once
	closeErr  error
}

// New reads the identity and swarm keys and checks the config. It opens
// no file for writing and no socket.
func New(r *repo.Repo, cfg config.Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key, psk, err := r.Keys(cfg)
	if err != nil {
		return nil, err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", repo.ErrIdentity, err)
	}
	n := &Node{repo: r, cfg: cfg, opts: opts, key: key, id: id, swarm: p2p.Swarm{Name: cfg.Swarm.Name, PSK: psk}, clock: clock.Or(opts.Clock), coords: p2p.NewCoordinates()}
	n.limits = n.swarm.Limits()
	if n.opts.Logger == nil {
		n.opts.Logger = slog.Default()
	}
	n.log = n.opts.Logger.With("subsystem", LogNode)
	for _, s := range cfg.Network.Bootstrap {
		ai, err := p2p.ParseAddrInfo(s)
		if err != nil {
			return nil, err
		}
		n.bootstrap = append(n.bootstrap, ai)
	}
	for _, s := range cfg.Swarm.AllowList {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("swarm.allow_list: %q: %w", s, err)
		}
		n.allow = append(n.allow, id)
	}
	if len(n.allow) > 0 {
		for _, ai := range n.bootstrap {
			n.allow = append(n.allow, ai.ID)
		}
	}
	if loc := cmp.Or(cfg.Network.Location, providerCountry(cfg)); loc != "" {
		p, err := geo.ParsePlace(loc)
		if err != nil {
			return nil, fmt.Errorf("network.location: %w", err)
		}
		n.place = &p
	}
	if p := cfg.Attest.CCRootCert; p != "" {
		if !filepath.IsAbs(p) {
			p = r.File(p)
		}
		if n.ccRoots, err = attest.LoadCCRoots(p); err != nil {
			return nil, fmt.Errorf("attest.cc_root_cert: %w", err)
		}
	}
	return n, nil
}

// providerCountry is where a provider says its hardware is: the default
// location of a provider node.
func providerCountry(cfg config.Config) string {
	if cfg.Provider.Enabled {
		return cfg.Provider.Country
	}
	return ""
}

// Mode is "server" or "client": the DHT mode this node runs in.
func (n *Node) Mode() string {
	if n.opts.Light {
		return config.DHTClient
	}
	return n.cfg.DHT.Mode
}

// Start brings the node up, part by part: it locks the repository, binds
// the API port, starts the host, dials the bootstrap peers (and fails with
// p2p.ErrNoBootstrap when none answers, unless Options.RetryBootstrap)
// before it writes a byte, opens
// the datastore, starts discovery and gossip, the market, the renter, the
// provider and its leases, ping, and serves the API once the node is
// whole. On failure it stops what it started.
func (n *Node) Start(ctx context.Context) error {
	n.started = n.clock.Now()
	n.base = context.WithoutCancel(ctx)
	for _, s := range n.steps() {
		stop, err := s.start(ctx)
		if stop != nil {
			n.stops = append(n.stops, namedStop{s.name, stop})
		}
		if err != nil {
			n.Close()
			return err
		}
	}
	n.running = true
	n.log.Info("node started", "peer", n.id, "swarm", n.swarm.ID(), "mode", n.Mode(), "api", n.apiAddr, "listen", n.host.Network().ListenAddresses())
	return nil
}

// Close stops everything Start started, in reverse order, and waits: the
// API first (no new callers), then ping, the leases (their containers run
// on for the next start to adopt), the provider (its offer withdrawn),
// the renter, the market, gossip, discovery, the datastore (flushed and
// closed), the host and last the repository lock. It is safe to call more
// than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		for i := len(n.stops) - 1; i >= 0; i-- {
			if err := n.stops[i].stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", n.stops[i].name, err))
			}
		}
		n.closeErr = errors.Join(errs...)
		if n.running {
			n.log.Info("node stopped", "peer", n.id)
		}
	})
	return n.closeErr
}

// APIAddr is the API's base URL, such as http://127.0.0.1:5080.
func (n *Node) APIAddr() string { return n.apiAddr }

// Swarm returns the swarm the node is in.
func (n *Node) Swarm() p2p.Swarm { return n.swarm }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.id }

// Addrs returns the node's full dialable addresses (with /p2p/<id>).
func (n *Node) Addrs() []string {
	ais, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: n.id, Addrs: n.host.Addrs()})
	if err != nil {
		return nil
	}
	return strs(ais)
}

// leaseStore is the node's store of leases, settling through
// Options.Settlement (default: the local ledger).
func (n *Node) leaseStore() records.Store {
	settle := n.opts.Settlement
	if settle == nil && n.cfg.Settlement.Kind == config.SettleNone {
		settle = noLedger{}
	}
	return records.Store{D: n.store, Settle: settle, Clock: n.clock}
}

func multiaddrs(ss []string) ([]ma.Multiaddr, error) {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", config.ErrConfig, s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func strs[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

// APIToken is the token the node's API asks for changes (the repository's
// api.token).
func (n *Node) APIToken() (string, error) { return n.repo.APIToken() }

// Sentinel errors of package node.
var (
	// ErrAPIListen is returned when the local API port cannot be bound.
	ErrAPIListen = errors.New("cannot start the local API")
	// ErrClosed is returned by calls on a node that is closing.
	ErrClosed = owner.ErrClosed
)
