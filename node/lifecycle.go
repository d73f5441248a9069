package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/idlegrid/idlegrid/node/data"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/idlegrid/idlegrid/internal/atomicfile"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/namespace"
	pebbleds "github.com/ipfs/go-ds-pebble"
)

// step is one part of a node: start brings it up and returns what stops
// it (nil when there is nothing to stop); a failed start undoes its own
// partial work.
type step struct {
	name  string
	start func(ctx context.Context) (stop func() error, err error)
}

type namedStop struct {
	name string
	stop func() error
}

// steps are the node's parts in the order they start; Close stops them
// in reverse. Each line says why it sits where it does.
func (n *Node) steps() []step {
	return []step{
		{"repository lock", n.lockRepo},   // nothing else may touch the repository first
		{"api listener", n.bindAPI},       // a busy port fails at once, before any work
		{"host", n.startHost},             // the identity on the network
		{"bootstrap", n.joinSwarm},        // a node that cannot join fails without writing a byte
		{"datastore", n.openStore},        // everything below may read and write it
		{"discovery", n.startDiscovery},   // the DHT keeps its records in the datastore
		{"exchange", n.startExchange},     // datasets' blocks; their holders found through the DHT
		{"gossip", n.startGossip},         // topics before anyone publishes or reads
		{"wallet", n.openWallet},          // the chain a node pays on, before a bid names it
		{"parts", n.buildParts},           // wired together before any starts
		{"reputation", n.startReputation}, // scores before the matcher weighs them
		{"market", n.startMarket},         // the book before the renter reads it and the provider quotes from it
		{"renter", n.startRenter},         // resumes rentals; needs the book and the market's streams
		{"provider", n.startProvider},     // its offer in its own book before leases are admitted
		{"leases", n.startLeases},         // recovers the provider's leases, then serves proposals
		{"ping", n.startPing},             // RTTs for the matcher
		{"api", n.serveAPI},               // served only once the node is whole
	}
}

func (n *Node) lockRepo(context.Context) (func() error, error) {
	unlock, err := n.repo.Lock()
	if err != nil {
		return nil, err
	}
	return func() error { unlock(); return nil }, nil
}

func (n *Node) bindAPI(context.Context) (func() error, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.cfg.API.Port)))
	if err != nil {
		return nil, fmt.Errorf("%w: api.port %d: %v; change api.port in %s or stop what holds it", ErrAPIListen, n.cfg.API.Port, errors.Unwrap(err), n.repo.ConfigPath())
	}
	n.apiLn, n.apiAddr = ln, "http://"+ln.Addr().String()
	n.metrics = metrics.New(metrics.Info{Version: n.opts.Version, Swarm: n.swarm.ID(), Mode: n.Mode(), Currency: n.cfg.Provider.Currency, Process: n.opts.ProcessMetrics},
		append(nodeGauges(n), newReputationCollector(n), newValidatorCollector(n), newLeaseCollector(n))...)
	return func() error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}, nil
}

func (n *Node) startHost(context.Context) (func() error, error) {
	if n.opts.Host != nil {
		h, err := n.opts.Host(n.key)
		if err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		if h.ID() != n.id {
			h.Close()
			return nil, fmt.Errorf("host: it runs as %s, not as this node's identity %s", h.ID(), n.id)
		}
		n.host, n.conns = h, newConnTracker(h)
		return n.watchReachability()
	}
	listen, err := multiaddrs(n.cfg.Network.Listen)
	if err != nil {
		return nil, err
	}
	announce, err := multiaddrs(n.cfg.Network.Announce)
	if err != nil {
		return nil, err
	}
	r := n.cfg.Resources
	nat := natConfig(n.cfg.NAT, n.opts.Light)
	nat.Vouch = n.relayVouch.Allows
	n.host, err = p2p.NewHost(p2p.HostConfig{
		Identity: n.key, Swarm: n.swarm, ListenAddrs: listen, AnnounceAddrs: announce, AllowList: n.allow,
		ConnLow: n.cfg.Network.ConnLow, ConnHigh: n.cfg.Network.ConnHigh, ConnGrace: n.cfg.Network.ConnGrace.Std(),
		Limits: p2p.Limits{MaxMemory: int64(r.MaxMemoryMiB) << 20, MaxFDs: r.MaxFDs, MaxConns: r.MaxConns,
			MaxConnsInbound: r.MaxConnsInbound, MaxStreams: r.MaxStreams},
		UserAgent:  "idlegrid/" + n.opts.Version,
		Registerer: n.metrics.Reg,
		NAT:        nat,
	})
	if err != nil {
		if errors.Is(err, p2p.ErrListen) {
			return nil, fmt.Errorf("%w; change network.listen in %s or stop what holds the port", err, n.repo.ConfigPath())
		}
		return nil, err
	}
	n.conns = newConnTracker(n.host)
	return n.watchReachability()
}

// watchReachability follows the host's reachability for status; the stop
// it returns ends the watch and closes the host.
func (n *Node) watchReachability() (func() error, error) {
	w, err := p2p.WatchReachability(n.host)
	if err != nil {
		n.host.Close()
		return nil, err
	}
	n.reach = w
	return func() error { w.Close(); return n.host.Close() }, nil
}

func (n *Node) joinSwarm(ctx context.Context) (func() error, error) {
	err := p2p.ConnectPeers(ctx, n.host, n.bootstrap, n.cfg.Network.DialTimeout.Std(), n.log)
	switch {
	case err == nil:
		return nil, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("start: %w", ctx.Err())
	case n.opts.RetryBootstrap:
		n.log.Warn("starting without a peer; dialling the bootstrap peers again with back-off", "err", err, "config", n.repo.ConfigPath())
		return nil, nil
	}
	return nil, &BootstrapError{Err: err, ConfigPath: n.repo.ConfigPath()}
}

// BootstrapError is a start that reached none of the bootstrap peers
// (Err, a p2p.ErrNoBootstrap naming each peer's failure) that
// network.bootstrap of ConfigPath names.
type BootstrapError struct {
	Err        error
	ConfigPath string
}

func (e *BootstrapError) Error() string {
	return fmt.Sprintf("%v; check network.bootstrap in %s and that those peers are running", e.Err, e.ConfigPath)
}

func (e *BootstrapError) Unwrap() error { return e.Err }

func (n *Node) openStore(context.Context) (func() error, error) {
	// Every write is fsynced: what the node stored survives a crash.
	store, err := pebbleds.NewDatastore(n.repo.DatastorePath(), pebbleds.WithPebbleWriteOptions(pebble.Sync))
	if err != nil {
		return nil, fmt.Errorf("open datastore %s: %w", n.repo.DatastorePath(), err)
	}
	n.store = store
	n.datasetAPI = datasetAPI{data: data.Open(store, int64(n.cfg.Datasets.CacheGiB)<<30, n.clock)}
	return func() error {
		// The parts stopped first have cancelled their handlers; those
		// still answering a peer end within their deadlines.
		if left := n.handlers.Close(handlersGrace); left > 0 {
			n.log.Warn("closing the datastore while stream handlers still run", "handlers", left)
		}
		return store.Close()
	}, nil
}

func (n *Node) startDiscovery(context.Context) (func() error, error) {
	disc, err := p2p.NewDiscovery(n.host, p2p.DiscoveryConfig{
		Swarm: n.swarm, Server: n.Mode() == config.DHTServer, Bootstrap: n.bootstrap,
		Datastore:           namespace.Wrap(n.store, ds.NewKey("/dht")),
		RebootstrapInterval: n.cfg.DHT.RebootstrapInterval.Std(),
		FindInterval:        n.cfg.DHT.FindInterval.Std(),
		SettledInterval:     n.cfg.DHT.SettledInterval.Std(),
		MaxPeers:            n.cfg.DHT.MaxPeers,
		Want:                n.cfg.Network.ConnLow,
		Nearness:            n.coords.Nearness,
		DialTimeout:         n.cfg.Network.DialTimeout.Std(),
		Logger:              n.opts.Logger.With("subsystem", LogP2P),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(n.base)
	stop := func() error { cancel(); return disc.Close() }
	if err := disc.Start(ctx); err != nil {
		return stop, err
	}
	n.disc = disc
	return stop, nil
}

func (n *Node) startGossip(context.Context) (func() error, error) {
	ctx, cancel := context.WithCancel(n.base)
	g, err := p2p.NewGossip(ctx, n.host, p2p.GossipConfig{
		Swarm: n.swarm, OutboundQueue: n.cfg.Gossip.OutboundQueue, MaxMessageSize: n.cfg.Gossip.MaxMessageSize,
		PeerScoring: n.cfg.Gossip.PeerScoring, ValidatorTimeout: n.cfg.Gossip.ValidatorTimeout.Std(),
		Logger: n.opts.Logger.With("logger", "pubsub"),
	})
	if err != nil {
		cancel()
		return nil, err
	}
	n.gossip = g
	n.link = &swarm.Link{Host: n.host, Swarm: n.swarm, Gossip: g, Disc: n.disc, Clock: n.clock}
	// The topics close once the market's readers have cancelled their
	// subscriptions (it stops first); the router stops with its context.
	return func() error { err := g.Close(); cancel(); return err }, nil
}

// server is what a part serves its protocols with.
func (n *Node) server(ctx context.Context) p2p.Server {
	return p2p.Server{Host: n.host, Swarm: n.swarm, Ctx: ctx, Log: n.opts.Logger.With("subsystem", LogP2P), Handlers: &n.handlers}
}

// handlersGrace is how long a closing node waits for its stream handlers
// before it closes the datastore under them.
const handlersGrace = time.Second

func (n *Node) startReputation(ctx context.Context) (func() error, error) {
	if err := n.reputation.Load(ctx); err != nil {
		return nil, fmt.Errorf("reputation: %w", err)
	}
	ctx, cancel := context.WithCancel(n.base)
	p2p.ServeReceipts(n.server(ctx), n.reputation.ReceiptsOf)
	p2p.ServeChain(n.server(ctx), func(ctx context.Context, q p2p.ChainQuery) ([][]byte, error) {
		return n.records.Range(ctx, q.From, cmp.Or(q.Want, p2p.MaxChainReply), q.About)
	})
	p2p.ServeSeeds(n.server(ctx), n.configuredSeeds)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.reputation.Run(ctx) }()
	go func() { defer wg.Done(); n.inheritSeeds(ctx) }()
	return func() error { cancel(); wg.Wait(); return nil }, nil
}

func (n *Node) startMarket(ctx context.Context) (func() error, error) {
	if err := n.market.Open(ctx, namespace.Wrap(n.store, ds.NewKey("/market"))); err != nil {
		return nil, fmt.Errorf("market: %w", err)
	}
	mctx, cancel := context.WithCancel(n.base)
	gone, unwatch := book.Disconnects(n.host)
	stop := func() error {
		unwatch()
		cancel()
		return n.market.Close()
	}
	if err := n.market.Start(mctx, n.server(mctx), n.gossip, gone); err != nil {
		return stop, err
	}
	return stop, nil
}

func (n *Node) startRenter(context.Context) (func() error, error) {
	n.renter.Start(n.base)
	return func() error { n.renter.Stop(); return nil }, nil
}

func (n *Node) startPing(context.Context) (func() error, error) {
	n.loadCoordinate()
	ctx, cancel := context.WithCancel(n.base)
	p2p.ServeCoord(n.server(ctx), n.coords.Own)
	n.pinger = p2p.NewPinger(n.host, n.cfg.Network.PingInterval.Std(), n.opts.Logger.With("subsystem", LogP2P))
	n.pinger.Track(n.coords, n.swarm)
	n.keeper = p2p.NewKeeper(n.host, n.coords.RTT, n.cfg.Network.NearPeers, n.cfg.Network.RandomPeers)
	n.pinger.Start(n.base)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.keepNear(ctx)
	}()
	return func() error { n.pinger.Close(); cancel(); <-done; n.saveCoordinate(); return nil }, nil
}

func (n *Node) serveAPI(context.Context) (func() error, error) {
	token, err := n.repo.APIToken()
	if err != nil {
		return nil, err
	}
	srv := api.NewServer(n.API(), n.metrics.Reg, api.Guard{Token: token, OpenMetrics: n.cfg.API.OpenMetrics}, n.opts.Logger.With("subsystem", LogAPI))
	srv.Serve(n.apiLn)
	file := filepath.Join(n.repo.Path, repo.APIFile)
	stop := func() error {
		os.Remove(file)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	if err := atomicfile.Write(file, []byte(n.apiAddr+"\n"), 0o600); err != nil {
		return stop, fmt.Errorf("write api file: %w", err)
	}
	return stop, nil
}

// natConfig is the host's NAT configuration; a light client relays for
// no one.
func natConfig(n config.NATConfig, light bool) p2p.NATConfig {
	return p2p.NATConfig{
		Reachability: n.Reachability, PortMap: n.PortMap, HolePunching: n.HolePunching,
		AutoRelay: n.AutoRelay && !light, RelayService: n.RelayService && !light,
		Relay: p2p.RelayLimits{Reservations: n.RelayReserve, CircuitsPerPeer: n.RelayCircuits,
			Duration: n.RelayDuration.Std(), Bytes: int64(n.RelayMiB) << 20},
	}
}
