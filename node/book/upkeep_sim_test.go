//go:build !race

package book_test

import (
	"context"
	"flag"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/peer"
)

var upkeepSize = flag.Int("upkeep", 0, "TestSimulatedUpkeep measures a swarm of this many nodes, each a provider of one offer, over a 30-minute window")

// TestSimulatedUpkeep measures what a node of a settled swarm spends on
// the network, every protocol together and the market's own book sync
// among them, in simulated time (p2ptest.Simulate). Its nodes are
// p2ptest's (the daemon's discovery, bounds, coordinates and gossip, on
// mocknet with the PlanetLab matrix's latencies), each with the node's
// market side (book.Market: validators, book, book sync with its digest,
// evidence sync) and the node's link, and each a provider whose offer
// (node/offer.Build, signed with its key) it publishes once and then
// again every three quarters of the offer's TTL (45 minutes), from a
// random phase, as node/provider does.
//
// Every node's book must hold every offer at its last seq by the end of
// the window; the book syncs in the window must carry no more offers
// than were published in it (and one a node, for a race with gossip),
// since books that agree exchange only digests; and book sync's bytes
// must stay within what docs/scale.md's model says a
// resync costs: a node asks one random peer every 2 minutes
// (resyncInterval) with a digest of 20 bytes an offer, and gets the
// offers that differ (syncOverhead bounds them and the framing). By default 40 nodes over a 10-minute window; -upkeep 200
// measures 200 over 30 minutes:
//
//	go test ./node/book -run TestSimulatedUpkeep -upkeep 200 -v -timeout 60m
func TestSimulatedUpkeep(t *testing.T) {
	n, window := 40, 10*time.Minute
	if *upkeepSize > 0 {
		n, window = *upkeepSize, 30*time.Minute
	}
	p2ptest.Simulate(t, func(t *testing.T) { measureUpkeep(t, n, window) })
}

// republishEvery is when node/provider publishes its offer again: three
// quarters of the default offer TTL.
var republishEvery = config.DefaultConfig(config.ProfileProvider).Provider.OfferTTL.Std() * 3 / 4

func measureUpkeep(t *testing.T, n int, window time.Duration) {
	start := time.Now()
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	lat := m.Rows(m.CompleteRows(0, min(n, 200)))
	if n > len(lat) {
		lat = lat.Expand(n, 0.1, 7)
	}
	s := p2ptest.NewMocknet(t, n, p2ptest.WithLatency(lat, 0), p2ptest.WithTraffic(), p2ptest.WithLazyLinks(),
		p2ptest.WithBounds(32, 64, 20*time.Second), p2ptest.WithIntervals(time.Minute, 15*time.Minute), p2ptest.WithLocality(30*time.Second, 8, 8))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	formed, fcancel := context.WithTimeout(ctx, time.Duration(max(1, n/200))*15*time.Minute)
	defer fcancel()
	if err := s.WaitMeshOf(formed, 1, p2p.TopicOffers); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes formed at %s simulated", n, time.Since(start).Round(time.Second))

	prov := config.DefaultConfig(config.ProfileProvider).Provider
	prov.GPUs = []config.GPUConfig{{Model: "A100", Count: 8, VRAMGiB: 80, ComputeCapability: "8.0"}}
	markets := make([]*book.Market, n)
	var carried atomic.Int64 // offers the book syncs carried
	links := make([]*swarm.Link, n)
	for i, nd := range s.Nodes {
		store := dssync.MutexWrap(ds.NewMapDatastore())
		links[i] = &swarm.Link{Host: nd.Host, Swarm: s.Swarm(), Gossip: nd.Gossip, Disc: nd.Discovery, Clock: clock.System()}
		mk := book.New(book.Deps{Self: nd.Host.ID(), Net: countSynced{links[i], &carried}, Store: store, Clock: clock.System(),
			Log: slog.New(slog.DiscardHandler), Limits: market.DefaultLimits(), Book: market.DefaultBookLimits()})
		if err := mk.Open(ctx, store); err != nil {
			t.Fatal(err)
		}
		gone, unwatch := book.Disconnects(nd.Host)
		t.Cleanup(unwatch)
		if err := mk.Start(ctx, p2p.Server{Host: nd.Host, Swarm: s.Swarm(), Ctx: ctx}, nd.Gossip, gone); err != nil {
			t.Fatal(err)
		}
		markets[i] = mk
	}
	t.Cleanup(func() {
		cancel()
		for _, mk := range markets {
			mk.Close()
		}
	})

	// Each node publishes its offer now, as a provider does once the
	// offers topic has a mesh, and again every republishEvery from a
	// random phase: the steady rate of a swarm of providers.
	var wg sync.WaitGroup
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer func() { stopPublishing(); wg.Wait() }()
	latest := make([]atomic.Uint64, n) // each node's last offer's seq
	var published atomic.Int64         // offers published, from the window's start
	rnd := mrand.New(mrand.NewPCG(uint64(n), 6))
	for i, nd := range s.Nodes {
		key := nd.Host.Peerstore().PrivKey(nd.Host.ID())
		publish := func(seq uint64) {
			o, err := offer.Build(prov, nd.Host.ID(), seq, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			env, err := market.Sign(key, o)
			if err != nil {
				t.Error(err)
				return
			}
			// A publication can take seconds: the link looks the offer's
			// shard up first. One that the end of the window cuts off is
			// not the last published.
			if err := links[i].Publish(pubCtx, p2p.TopicOffers, env); err != nil {
				if pubCtx.Err() == nil {
					t.Errorf("node %d: %v", i, err)
				}
				return
			}
			latest[i].Store(seq)
			published.Add(1)
		}
		phase := time.Duration(rnd.Int64N(int64(republishEvery)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			publish(1)
			next := time.NewTimer(phase)
			defer next.Stop()
			for seq := uint64(2); ; seq++ {
				select {
				case <-pubCtx.Done():
					return
				case <-next.C:
					publish(seq)
					next.Reset(republishEvery)
				}
			}
		}()
	}

	// Settled: the join syncs are done and the resyncs at their 2-minute
	// pace (5 s, doubling).
	time.Sleep(5 * time.Minute)
	for _, nd := range s.Nodes {
		nd.Traffic.Reset()
	}
	synced := booksSynced(markets)
	carried.Store(0)
	published.Store(0)
	time.Sleep(window)
	inWindow := published.Load()
	by := map[string]float64{}
	var total float64
	for f, b := range s.BytesByFamily() {
		by[f] = float64(b) / float64(n) / window.Minutes()
		total += by[f]
	}
	// Once the last publications have had 10 s to spread, every book
	// holds every node's offer at its last seq.
	stopPublishing()
	wg.Wait()
	time.Sleep(10 * time.Second)
	for i, mk := range markets {
		if got := mk.Snapshot().Len(); got != n {
			t.Errorf("node %d holds %d offers at the window's end, want every node's %d", i, got, n)
		}
		stale := 0
		for _, o := range mk.Snapshot().Offers() {
			j := slices.IndexFunc(s.Nodes, func(nd *p2ptest.Node) bool { return string(o.Header.Issuer) == string(nd.Host.ID()) })
			if j >= 0 && o.Header.Seq < latest[j].Load() {
				stale++
			}
		}
		if stale > 0 {
			t.Errorf("node %d holds %d offers at an older seq than their issuers last published", i, stale)
		}
	}
	nsyncs := booksSynced(markets) - synced
	syncs := float64(nsyncs) / float64(n) / window.Minutes()
	// p2ptest counts a stream's bytes once, at the end that opened it: a
	// node's share is the syncs it asks for, one every resyncInterval.
	model := float64(n) * digestEntry / 2
	t.Logf("%d nodes, %d offers, republished every %v: %.1f KB/node/min in %v (%s); offers' gossip %.1f, so %.2f times it; book sync %.2f KB/node/min (%.2f syncs a node a minute, %.1f KB and %.2f offers a sync), its digests %.2f",
		n, n, republishEvery, total/1e3, window, p2ptest.FormatKB(by), by["gossip"]/1e3, total/by["gossip"], by["book"]/1e3, syncs, by["book"]/syncs/1e3, float64(carried.Load())/float64(nsyncs), model/1e3)
	// Books that agree send nothing but their digests: a sync carries an
	// offer only where gossip had not yet brought it, or not at all.
	if c := carried.Load(); c > inWindow+int64(n) {
		t.Errorf("the book syncs carried %d offers in the window, where %d were published: a sync sends offers its asker holds", c, inWindow)
	}
	if limit := (2*float64(n)*digestEntry + syncOverhead) / 2; by["book"] > limit {
		t.Errorf("book sync moved %.0f B/node/min, past %.0f: a sync every 2 minutes of twice the digest of %d offers and %d bytes more", by["book"], limit, n, syncOverhead)
	}
}

// countSynced is a market's link that counts the offers its book syncs
// carry.
type countSynced struct {
	*swarm.Link
	n *atomic.Int64
}

func (c countSynced) FetchShards(ctx context.Context, p peer.ID, shards []string, held *p2p.BookDigest, each func([]byte)) (int, error) {
	return c.Link.FetchShards(ctx, p, shards, held, func(env []byte) { c.n.Add(1); each(env) })
}

// booksSynced is the book syncs the markets have made.
func booksSynced(markets []*book.Market) int64 {
	var n int64
	for _, mk := range markets {
		n += mk.Synced()
	}
	return n
}

// digestEntry is a book digest's bytes an offer (p2p.BookDigest).
const digestEntry = 20

// syncOverhead bounds what one book sync carries beyond its digest: the
// stream's protocol negotiation, the request's and answer's headers, the
// few offers that differ, and the evidence sync after it. A sync that
// sent the whole book (about 600 bytes an offer) is well past it.
const syncOverhead = 4096
