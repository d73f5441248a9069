package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// BenchmarkNearestOfFiftyProviders measures how near a renter's first
// choice is among 50 providers at one price and GPU, on mocknet with the
// PlanetLab matrix: for 20 renter positions, a fresh light renter (ranks
// as soon as its book holds the 50 offers; its rental measures the best
// candidates first), a light renter and a daemon whose coordinates have
// settled and taken 100 samples more; the figure is the chosen provider's true RTT over the nearest
// provider's, p50 and p90 for each kind, and how many bids with max_rtt
// 100ms (of those whose renter has a provider within 100 ms) were given a
// provider beyond it. It runs once, whatever b.N.
//
//	go test ./node -run '^$' -bench NearestOfFiftyProviders -benchtime 1x
func BenchmarkNearestOfFiftyProviders(b *testing.B) {
	const providers, positions = 50, 20
	ms := newMockSwarm(b)
	pace := func(c *config.Config) { c.Network.PingInterval = config.Dur(2 * time.Second) }
	boot := startNode(b, testRepo(b, "boot", pace), ms.on(Options{}))
	var provs []*Node
	for i := range providers {
		provs = append(provs, startNode(b, testRepo(b, fmt.Sprint("prov", i), both(bootstrapFrom(boot), pace, func(c *config.Config) {
			c.Provider.Enabled, c.Provider.Price = true, "2.00"
			c.Provider.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
		})), ms.on(Options{})))
	}
	req := api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, MaxPrice: "2.50"}
	capped := req
	capped.MaxRTTMillis = 100
	ratios := map[string][]float64{}
	// beyond counts, per kind, the bids with max_rtt 100ms whose first
	// choice lies beyond 100 ms when a provider within it exists.
	beyond, cappedBids := map[string]int{}, map[string]int{}
	first := func(n *Node, req api.BidRequest) (peer.ID, bool) {
		b.Helper()
		bid, err := buildBid(req, n.id, n.swarm, time.Now(), nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		cands := n.renter.Candidates(context.Background(), n.market.MatcherFor(req), bid, maxRentCandidates, time.Now(), RentOutput{})
		if len(cands) == 0 {
			return "", false
		}
		return cands[0].Issuer, true
	}
	choose := func(kind string, n *Node) {
		b.Helper()
		self, _ := ms.row(n.id)
		truth := func(p peer.ID) time.Duration { r, _ := ms.row(p); return ms.m.OneWay(self, r) * 2 }
		var best time.Duration
		for _, p := range provs {
			if d := truth(p.id); best == 0 || d < best {
				best = d
			}
		}
		chosen, ok := first(n, req)
		if !ok {
			b.Fatalf("%s: no candidate", kind)
		}
		ratios[kind] = append(ratios[kind], float64(truth(chosen))/float64(best))
		if best <= 100*time.Millisecond {
			cappedBids[kind]++
			if c, ok := first(n, capped); ok && truth(c) > 100*time.Millisecond {
				beyond[kind]++
			}
		}
	}
	full := func(n *Node) bool { return n.market.Snapshot().Len() >= providers }
	wait := func(what string, within time.Duration, cond func() bool) { waitFor(b, within, what, cond) }
	b.ResetTimer()
	for pos := range positions {
		fresh := startNode(b, testRepo(b, fmt.Sprint("fresh", pos), bootstrapFrom(boot)), ms.on(Options{Light: true}))
		wait("the fresh renter's book", 60*time.Second, func() bool { return full(fresh) })
		choose("fresh", fresh)
		fresh.Close()
		light := startNode(b, testRepo(b, fmt.Sprint("light", pos), both(bootstrapFrom(boot), pace)), ms.on(Options{Light: true}))
		daemon := startNode(b, testRepo(b, fmt.Sprint("daemon", pos), both(bootstrapFrom(boot), pace)), ms.on(Options{}))
		for _, n := range []*Node{light, daemon} {
			wait("a settled coordinate and a full book", 90*time.Second, func() bool { return full(n) && n.coords.Error() <= p2p.EstimateMaxError })
			settled := n.coords.Stats().Samples
			wait("100 more samples", 60*time.Second, func() bool { return n.coords.Stats().Samples >= settled+100 })
		}
		choose("light", light)
		choose("daemon", daemon)
		light.Close()
		daemon.Close()
	}
	b.StopTimer()
	for _, kind := range []string{"fresh", "light", "daemon"} {
		r := slices.Sorted(slices.Values(ratios[kind]))
		p50, p90 := r[len(r)/2], r[min(len(r)-1, len(r)*9/10)]
		b.ReportMetric(p50, kind+"-chosen/best-p50")
		b.ReportMetric(p90, kind+"-chosen/best-p90")
		b.ReportMetric(float64(beyond[kind]), kind+"-max_rtt-beyond")
		b.Logf("%s: chosen/best %v; max_rtt 100ms: %d of %d bids given a provider beyond it", kind, r, beyond[kind], cappedBids[kind])
	}
}
