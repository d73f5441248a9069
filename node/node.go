package node

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/namespace"
	pebbleds "github.com/ipfs/go-ds-pebble"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
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
}

// Node is one idlegrid peer: repository, datastore, libp2p host, DHT,
// rendezvous, gossip, ping and the local API. New builds it from a
// repository and starts nothing; Start brings it up; Close takes it down.
type Node struct {
	repo      *Repo
	cfg       Config
	opts      Options
	log       *slog.Logger
	key       crypto.PrivKey
	swarm     p2p.Swarm
	bootstrap []peer.AddrInfo
	allow     []peer.ID

	metrics  *metrics
	unlock   func()
	store    *pebbleds.Datastore
	host     host.Host
	disc     *p2p.Discovery
	gossip   *p2p.Gossip
	pinger   *p2p.Pinger
	conns    *connTracker
	market   *marketSide
	attested attestations
	ccRoots  *x509.CertPool // nil: CC evidence is shown, not verified
	provider *provider
	leases   *leaseManager // provider side of leases; nil unless a provider
	api      *api.Server
	apiLn    net.Listener
	running  bool // Start succeeded
	apiAddr  string
	started  time.Time

	cancel      context.CancelFunc // stops discovery, gossip and ping
	readCtx     context.Context    // lifetime of the goroutines in wg
	stopReaders context.CancelFunc // ends readCtx, before the router stops
	wg          sync.WaitGroup     // topic readers, market loops, provider
	closeOnce   sync.Once
	// users counts the callers (rentals) that use the datastore outside
	// wg; Close waits for them before it closes the store.
	usersMu  sync.Mutex
	users    sync.WaitGroup
	closing  bool
	closeErr error
}

// New reads the identity and swarm keys and checks the config. It opens
// no file for writing and no socket.
func New(repo *Repo, cfg Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key, err := repo.Identity()
	if err != nil {
		return nil, err
	}
	psk, err := repo.SwarmKey(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{repo: repo, cfg: cfg, opts: opts, key: key, swarm: p2p.Swarm{Name: cfg.Swarm.Name, PSK: psk}}
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
	if p := cfg.Attest.CCRootCert; p != "" {
		if !filepath.IsAbs(p) {
			p = repo.file(p)
		}
		if n.ccRoots, err = attest.LoadCCRoots(p); err != nil {
			return nil, fmt.Errorf("attest.cc_root_cert: %w", err)
		}
	}
	return n, nil
}

// Mode is "server" or "client": the DHT mode this node runs in.
func (n *Node) Mode() string {
	if n.opts.Light {
		return DHTClient
	}
	return n.cfg.DHT.Mode
}

// Start brings the node up: it locks the repository, binds the API port,
// opens the datastore, starts the host, dials the bootstrap peers (and
// fails with p2p.ErrNoBootstrap when none answers), then starts discovery,
// gossip, ping and the API. On failure it undoes what it did.
func (n *Node) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	n.started = time.Now()
	if n.unlock, err = n.repo.Lock(); err != nil {
		return err
	}
	// Bind the API port first so a busy port fails at once, but serve
	// only once the node is whole.
	n.apiLn, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cfg.API.Port)))
	if err != nil {
		return fmt.Errorf("%w: api.port %d: %v; change api.port in %s or stop what holds it", ErrAPIListen, n.cfg.API.Port, errors.Unwrap(err), n.repo.ConfigPath())
	}
	n.apiAddr = "http://" + n.apiLn.Addr().String()
	n.metrics = newMetrics(n)

	if err := n.startHost(); err != nil {
		return err
	}
	// Reach the swarm before touching the datastore: a node that cannot
	// join fails without writing a byte.
	if err := p2p.ConnectPeers(ctx, n.host, n.bootstrap, n.cfg.Network.DialTimeout.Std(), n.log); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("start: %w", ctx.Err())
		}
		return fmt.Errorf("%w; check network.bootstrap in %s and that those peers are running", err, n.repo.ConfigPath())
	}
	// Every write is fsynced: what the node stored survives a crash.
	if n.store, err = pebbleds.NewDatastore(n.repo.DatastorePath(), pebbleds.WithPebbleWriteOptions(pebble.Sync)); err != nil {
		return fmt.Errorf("open datastore %s: %w", n.repo.DatastorePath(), err)
	}
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := n.startDiscovery(ctx); err != nil {
		return err
	}
	if err := n.startGossip(ctx); err != nil {
		return err
	}
	if err := n.startMarket(n.readCtx); err != nil {
		return err
	}
	n.wg.Add(1)
	go n.resumeRentals(n.readCtx)
	if n.cfg.Provider.Enabled {
		source := n.opts.GPUSource
		if source == nil {
			if source, err = n.cfg.Provider.gpuSource(n.host.ID().String()); err != nil {
				return fmt.Errorf("provider.gpu_source: %w", err)
			}
		}
		n.provider = newProvider(n, source)
		if source != nil {
			p2p.ServeAttestation(n.host, n.makeDocument)
		}
		n.provider.prepare(ctx)
		n.wg.Add(1)
		go n.provider.run(n.readCtx)
		if err := n.startLeases(n.readCtx, source); err != nil {
			return err
		}
	}
	n.pinger = p2p.NewPinger(n.host, n.cfg.Network.PingInterval.Std(), n.opts.Logger.With("subsystem", LogP2P))
	n.pinger.Start(ctx)
	n.api = api.NewServer(n, n.metrics.reg, n.opts.Logger.With("subsystem", LogAPI))
	n.api.Serve(n.apiLn)
	if err := writeFileAtomic(filepath.Join(n.repo.Path, APIFile), []byte(n.apiAddr+"\n"), 0o600); err != nil {
		return fmt.Errorf("write api file: %w", err)
	}
	n.running = true
	n.log.Info("node started", "peer", n.host.ID(), "swarm", n.swarm.ID(), "mode", n.Mode(), "api", n.apiAddr, "listen", n.host.Network().ListenAddresses())
	return nil
}

func (n *Node) startHost() error {
	listen, err := multiaddrs(n.cfg.Network.Listen)
	if err != nil {
		return err
	}
	announce, err := multiaddrs(n.cfg.Network.Announce)
	if err != nil {
		return err
	}
	r := n.cfg.Resources
	n.host, err = p2p.NewHost(p2p.HostConfig{
		Identity:      n.key,
		Swarm:         n.swarm,
		ListenAddrs:   listen,
		AnnounceAddrs: announce,
		AllowList:     n.allow,
		ConnLow:       n.cfg.Network.ConnLow,
		ConnHigh:      n.cfg.Network.ConnHigh,
		ConnGrace:     n.cfg.Network.ConnGrace.Std(),
		Limits: p2p.Limits{
			MaxMemory:       int64(r.MaxMemoryMiB) << 20,
			MaxFDs:          r.MaxFDs,
			MaxConns:        r.MaxConns,
			MaxConnsInbound: r.MaxConnsInbound,
			MaxStreams:      r.MaxStreams,
		},
		UserAgent:  "idlegrid/" + n.opts.Version,
		Registerer: n.metrics.reg,
	})
	if err != nil {
		if errors.Is(err, p2p.ErrListen) {
			return fmt.Errorf("%w; change network.listen in %s or stop what holds the port", err, n.repo.ConfigPath())
		}
		return err
	}
	n.conns = newConnTracker(n.host)
	return nil
}

func (n *Node) startDiscovery(ctx context.Context) error {
	var err error
	n.disc, err = p2p.NewDiscovery(n.host, p2p.DiscoveryConfig{
		Swarm:               n.swarm,
		Server:              n.Mode() == DHTServer,
		Bootstrap:           n.bootstrap,
		Datastore:           namespace.Wrap(n.store, ds.NewKey("/dht")),
		RebootstrapInterval: n.cfg.DHT.RebootstrapInterval.Std(),
		FindInterval:        n.cfg.DHT.FindInterval.Std(),
		MaxPeers:            n.cfg.DHT.MaxPeers,
		DialTimeout:         n.cfg.Network.DialTimeout.Std(),
		Logger:              n.opts.Logger.With("subsystem", LogP2P),
	})
	if err != nil {
		return err
	}
	return n.disc.Start(ctx)
}

func (n *Node) startGossip(ctx context.Context) error {
	var err error
	n.gossip, err = p2p.NewGossip(ctx, n.host, p2p.GossipConfig{
		Swarm:            n.swarm,
		OutboundQueue:    n.cfg.Gossip.OutboundQueue,
		MaxMessageSize:   n.cfg.Gossip.MaxMessageSize,
		PeerScoring:      n.cfg.Gossip.PeerScoring,
		ValidatorTimeout: n.cfg.Gossip.ValidatorTimeout.Std(),
		Logger:           n.opts.Logger.With("logger", "pubsub"),
	})
	if err != nil {
		return err
	}
	// Readers (and the market loops and provider) get their own context:
	// Close stops them, so the provider can withdraw its offer and the
	// topics can be left while the router still runs, then stops the router.
	n.readCtx, n.stopReaders = context.WithCancel(ctx)
	for _, kind := range p2p.TopicKinds {
		sub, err := n.gossip.Topic(kind).Subscribe()
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", kind, err)
		}
		n.wg.Add(1)
		go n.readTopic(n.readCtx, kind, sub)
	}
	return nil
}

// readTopic drains one subscription. Messages reached it only after the
// topic's validator accepted them; the market work consumes them here.
func (n *Node) readTopic(ctx context.Context, kind string, sub *pubsub.Subscription) {
	defer n.wg.Done()
	defer sub.Cancel()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		n.metrics.gossipReceived.WithLabelValues(kind).Inc()
		switch m := msg.ValidatorData.(type) {
		case *pb.Offer:
			n.ingestOffer(m, msg.Data)
		case []peer.ID:
			n.recordOffenders(ctx, m)
		case *pb.Bid:
			n.market.book.PutBid(m, time.Now())
			if n.provider != nil {
				n.provider.answerAsync(ctx, m)
			}
		}
	}
}

// Publish gossips data on a topic kind (p2p.TopicOffers, …).
func (n *Node) Publish(ctx context.Context, kind string, data []byte) error {
	t := n.gossip.Topic(kind)
	if t == nil {
		return fmt.Errorf("publish: unknown topic kind %q", kind)
	}
	return t.Publish(ctx, data)
}

// Close stops everything Start started, in reverse order, and waits: the
// API first (no new readers), then ping, gossip, discovery, the host, and
// last the datastore (flushed and closed) and the repository lock. It is
// safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		switch {
		case n.api != nil:
			os.Remove(filepath.Join(n.repo.Path, APIFile))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			errs = append(errs, n.api.Shutdown(ctx))
			cancel()
		case n.apiLn != nil:
			n.apiLn.Close()
		}
		if n.pinger != nil {
			n.pinger.Close()
		}
		if n.stopReaders != nil {
			n.stopReaders()
		}
		n.wg.Wait()
		n.usersMu.Lock()
		n.closing = true
		n.usersMu.Unlock()
		n.users.Wait()
		if n.leases != nil {
			n.leases.close()
		}
		if n.gossip != nil {
			errs = append(errs, n.gossip.Close())
		}
		if n.cancel != nil {
			n.cancel()
		}
		if n.disc != nil {
			errs = append(errs, n.disc.Close())
		}
		if n.host != nil {
			errs = append(errs, n.host.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		if n.unlock != nil {
			n.unlock()
		}
		n.closeErr = errors.Join(errs...)
		if n.running {
			n.log.Info("node stopped", "peer", n.host.ID())
		}
	})
	return n.closeErr
}

// use registers a caller of the datastore that runs outside the node's
// own goroutines; done must be called when it is finished. It fails once
// the node is closing.
func (n *Node) use() (done func(), err error) {
	n.usersMu.Lock()
	defer n.usersMu.Unlock()
	if n.closing || n.readCtx == nil {
		return nil, ErrClosed
	}
	n.users.Add(1)
	return n.users.Done, nil
}

// Host returns the libp2p host (nil before Start).
func (n *Node) Host() host.Host { return n.host }

// Gossip returns the gossip router (nil before Start).
func (n *Node) Gossip() *p2p.Gossip { return n.gossip }

// Discovery returns the DHT and rendezvous discovery (nil before Start).
func (n *Node) Discovery() *p2p.Discovery { return n.disc }

// APIAddr is the API's base URL, such as http://127.0.0.1:5080.
func (n *Node) APIAddr() string { return n.apiAddr }

// Swarm returns the swarm the node is in.
func (n *Node) Swarm() p2p.Swarm { return n.swarm }

// Addrs returns the node's full dialable addresses (with /p2p/<id>).
func (n *Node) Addrs() []string {
	ais, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: n.host.ID(), Addrs: n.host.Addrs()})
	if err != nil {
		return nil
	}
	return strs(ais)
}

func multiaddrs(ss []string) ([]ma.Multiaddr, error) {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrConfig, s, err)
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
