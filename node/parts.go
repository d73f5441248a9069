package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/lease"
	"github.com/idlegrid/idlegrid/node/provider"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/node/trust"
	"github.com/idlegrid/idlegrid/node/trustchain"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The node's link is each component's way to the swarm.
var (
	_ provider.Publisher = (*swarm.Link)(nil)
	_ book.Syncer        = (*swarm.Link)(nil)
	_ renter.Dealer      = (*swarm.Link)(nil)
	_ trust.ReceiptNet   = (*swarm.Link)(nil)
	_ trust.ChallengeNet = (*swarm.Link)(nil)
)

// buildParts builds the market side, the challenger, the renter and, on
// a provider, the provider, and wires them together. It starts nothing.
func (n *Node) buildParts(ctx context.Context) (func() error, error) {
	log := n.opts.Logger.With("subsystem", LogNode)
	records, err := trustchain.Open(ctx, n.key, n.store)
	if err != nil {
		return nil, fmt.Errorf("lease records: %w", err)
	}
	n.records = records
	n.seeds.set(n.baseSeeds())
	n.reputation = trust.New(trust.Deps{
		Self: n.id, Swarm: n.swarm.Tag(), Seeds: n.seeds.ids(), Store: n.leaseStore(), Saved: n.store, Net: n.link,
		Providers: func() []peer.ID { return n.market.Providers() }, Clock: n.clock, Log: log,
		Report: func(ctx context.Context, ev []byte) error { return n.link.Publish(ctx, p2p.TopicEvidence, ev) },
	})
	n.market = book.New(book.Deps{
		Self: n.id, Roots: n.ccRoots, Book: market.BookLimits{Offers: n.cfg.Gossip.BookOffers, Bids: n.cfg.Gossip.BookBids}, Known: n.vouchedFor, Sources: n.isBootstrap,
		Net: n.link, Store: n.store, Rel: n.reputation, Rtt: n.rtts(), Clock: n.clock, Log: n.opts.Logger.With("subsystem", LogP2P), Limits: n.limits,
		Follow: followShards(n.cfg.Gossip.Follow), KeepShard: n.keepShard,
	})
	n.market.Received = n.metrics.Received
	n.relayVouch.Set(n.market.Snapshot, n.reputation.Scores)
	n.challenger = &trust.Challenger{Self: n.id, Swarm: n.swarm.Tag(), Net: n.link, Book: n.market.Snapshot, Roots: n.ccRoots, Clock: n.clock, Observe: n.reputation.Observe, Dispute: n.reputation.Dispute,
		Report: func(ctx context.Context, ev []byte) error { return n.link.Publish(ctx, p2p.TopicEvidence, ev) }, Metrics: n.metrics}
	n.renter = &renter.Renter{
		Id: n.id, Swarm: n.swarm, Key: n.key, Net: n.link, Market: n.market, Challenger: n.challenger, Store: n.leaseStore(),
		LogsDir: filepath.Join(n.repo.Path, repo.LogsDir), Clock: n.clock, Log: log, Ended: n.leaseEnded, Observe: n.reputation.Observe,
		LearnFor: n.reputation.LearnFor, MeasureFor: n.measure, AddrsOf: n.host.Peerstore().Addrs, Records: n.records, Wallet: n.wallet,
		Datasets: renterDatasets{n.datasetAPI.data},
	}
	if !n.cfg.Provider.Enabled {
		if n.cfg.Profile == config.ProfileProvider {
			log.Warn("this provider sells nothing: provider.enabled is false",
				"fix", "idlegrid config set provider.gpu_source nvml (or fake:dgxh100 to try the market), then idlegrid config set provider.enabled true, and restart the daemon")
		}
		return nil, nil
	}
	source := n.opts.GPUSource
	if source == nil {
		if source, err = provider.SourceOf(n.cfg.Provider, n.id.String()); err != nil {
			return nil, fmt.Errorf("provider.gpu_source: %w", err)
		}
		if source == nil {
			log.Warn("this provider sells GPUs listed by hand (provider.gpu_source = static): no attestation backs them, so renters skip its offer unless they rent with --no-attest",
				"fix", "idlegrid config set provider.gpu_source nvml")
		}
	}
	n.provider = provider.New(provider.Deps{ID: n.id, Swarm: n.swarm.Tag(), Key: n.key, Cfg: n.cfg.Provider, Source: source, Store: n.store, Net: n.link, Clock: n.clock, Log: log,
		Coord: n.coords.Own, RelayOnly: n.relayOnly, Book: n.market.Snapshot, PricesFrom: n.pricesFrom, VerifyMarket: n.newPriceVerifier().Verify, Metrics: n.metrics, Settlements: n.settlements(), Datasets: n.keptDatasets, Follow: n.market.Follow})
	n.market.OnBid = n.provider.OnBid
	return nil, nil
}

// leaseEnded counts an ended lease and has the scores recomputed.
func (n *Node) leaseEnded(rec *records.Lease, rc *pb.Receipt) {
	n.metrics.LeaseEnded(rec, rc)
	n.reputation.Poke()
}

// vouchedFor says whether this node vouches for issuer p, when its book
// is full and when it meters gossip and book sync (p2p.StrangerRates): a
// provider it attested. A connection is not trust: keys and connections
// cost an attacker nothing (issue 26, attack 9: a hundred connections,
// one per key, got 81,108 offers in 40 s past the strangers' budget), so
// a connected peer's messages share the strangers' budget, within its
// share of it, like anyone's.
func (n *Node) vouchedFor(p peer.ID) bool {
	return n.challenger.Attested(p)
}

// isBootstrap says whether p is one of the bootstrap peers this node's
// operator configured (network.bootstrap): the book-sync sources it takes
// whole, since a stranger cannot become one by connecting.
func (n *Node) isBootstrap(p peer.ID) bool {
	for _, ai := range n.bootstrap {
		if ai.ID == p {
			return true
		}
	}
	return false
}

func (n *Node) startProvider(context.Context) (func() error, error) {
	if n.provider == nil {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(n.base)
	n.provider.Start(ctx, n.server(ctx))
	return func() error { cancel(); n.provider.Close(); return nil }, nil
}

// startLeases opens the executor [jobs] names, builds the calendars from
// the provider's GPUs, recovers the leases a previous run left and serves
// the lease and job protocols.
func (n *Node) startLeases(ctx context.Context) (func() error, error) {
	if n.provider == nil {
		return nil, nil
	}
	exec, err := n.newExecutor()
	if err != nil {
		return nil, fmt.Errorf("jobs.executor: %w", err)
	}
	var inv *attest.Inventory
	if src := n.provider.Source(); src != nil {
		i, err := src.Inventory(ctx)
		if err != nil {
			closeExecutor(exec)
			return nil, fmt.Errorf("provider.gpu_source: %w", err)
		}
		inv = &i
	}
	lo, st, err := lease.New(lease.Deps{
		Id: n.id, Key: n.key, Limits: n.limits, Provider: n.cfg.Provider, Jobs: n.cfg.Jobs, Exec: exec, Store: n.leaseStore(),
		Clock: n.clock, Log: n.opts.Logger.With("subsystem", LogNode), Offer: n.provider.OwnOffer, Source: n.provider.Source(), Ended: n.leaseEnded,
		RenterScore: func(p peer.ID) float64 { return n.reputation.Scores().Of(p).AsRenter },
		StageDir:    filepath.Join(n.repo.Path, repo.StagingDir),
		Signed:      func() { n.reputation.Poke() },
		Metrics:     n.metrics,
		Records:     n.records,
		Wallet:      n.wallet,
		Datasets:    leaseDatasets{n.datasetAPI.data, n.datasetAPI.exchange, n.bookHolders, n.key},
		MountDir:    filepath.Join(n.repo.Path, repo.MountsDir),
	}, inv)
	if err != nil {
		closeExecutor(exec)
		return nil, err
	}
	lo.Holds = &lease.HoldPolicy{Share: n.cfg.Provider.NewRenterShare, Known: func(p peer.ID) bool { return n.reputation.Scores().Of(p).Trust > 0 }}
	n.leases = lo
	// The leases outlive a stop (a job runs on, and the next start adopts
	// it), but the streams that serve them end with it.
	sctx, scancel := context.WithCancel(n.base)
	lo.Start(n.base, st, n.server(sctx))
	if n.wallet != nil { // redeems this provider's vouchers
		redeeming := make(chan struct{})
		go func() { defer close(redeeming); n.wallet.Redeem(sctx, n.leaseStore().All) }()
		return func() error { scancel(); <-redeeming; lo.Stop(); return nil }, nil
	}
	return func() error { scancel(); lo.Stop(); return nil }, nil
}

func closeExecutor(e executor.Executor) {
	if e != nil {
		e.Close()
	}
}

// newExecutor opens the executor [jobs] names: nil for none. Containers
// are labelled with this provider's peer ID, so providers sharing one
// engine never adopt or stop each other's jobs.
func (n *Node) newExecutor() (executor.Executor, error) {
	switch n.cfg.Jobs.Executor {
	case config.ExecutorDocker:
		id := n.id.String()
		opts := []executor.DockerOption{executor.LabelPrefix("idlegrid-" + id[len(id)-12:])}
		if n.cfg.Jobs.DockerHost != "" {
			opts = append(opts, executor.DockerHost(n.cfg.Jobs.DockerHost))
		}
		return executor.NewDocker(opts...)
	case config.ExecutorProcess:
		dir := filepath.Join(n.repo.Path, "jobs")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return executor.NewProcess(executor.ProcessBaseDir(dir))
	}
	return nil, nil
}

// DevImage makes sure the local Docker engine has the image the devstack
// and the tests run jobs in (a static busybox, imported when absent: no
// registry is needed) and returns its name; an error says why there is
// no usable engine.
func DevImage(ctx context.Context) (string, error) {
	d, err := executor.NewDocker()
	if err != nil {
		return "", err
	}
	defer d.Close()
	return d.EnsureBusybox(ctx)
}

// newPriceVerifier is the node's verifier for its provider.
func (n *Node) newPriceVerifier() *provider.PriceVerifier {
	return &provider.PriceVerifier{
		Self: n.id, Book: n.market.Snapshot, Counts: n.pricesFrom, Clock: n.clock,
		Located: func(p peer.ID) bool { return len(n.host.Peerstore().Addrs(p)) > 0 },
		Challenge: func(ctx context.Context, p peer.ID) bool {
			c, err := n.challenger.Challenge(ctx, p)
			return err == nil && c.Verified()
		},
	}
}

// pricesFrom says whether p's offers count toward this node's
// market-following price: keys cost nothing, and 300 made-up offers in
// 15 s walked a follower from 2.49 to 1.56 (issue 26). An issuer counts
// where this node verified its attestation (a challenge it answered with
// the GPUs its offer claims) and knows where it listens, or where trust
// reaches it over co-signed receipts.
func (n *Node) pricesFrom(p peer.ID) bool {
	if n.challenger != nil && n.challenger.Attested(p) && len(n.host.Peerstore().Addrs(p)) > 0 {
		return true
	}
	if n.reputation != nil {
		if sc := n.reputation.Scores(); sc != nil && sc.Of(p).Trust > 0 {
			return true
		}
	}
	return false
}

// followShards are the shards of the GPU families gossip.follow names;
// nil (every shard) when it names none.
func followShards(families []string) []string {
	if len(families) == 0 {
		return nil
	}
	var out []string
	for _, f := range families {
		out = append(out, p2p.WantShards(f)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// keepShard keeps followers of a shard this node follows connected.
func (n *Node) keepShard(shard string) error {
	return n.link.Disc.KeepShard(shard, func() []peer.ID { return n.link.Gossip.ShardPeers(p2p.TopicOffers, shard) })
}
