package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A realistic book, shaped like a public GPU marketplace's: mostly
// consumer cards in one- to eight-GPU machines (a few of 10 or 16),
// workstation cards, and data-centre machines of 8; GPUs named as NVML
// names them, with the memory NVML reports; prices quantised to the
// cent, so that many offers tie; hosts whose cores, RAM, disk and
// bandwidth vary per GPU; some machines sold whole or in pairs.

// realGPU is a GPU as NVML reports it, with its share of the market's
// offers (weight), its price range per GPU-hour in cents, and the GPU
// counts its machines come in.
type realGPU struct {
	nvml    string
	mib     uint64 // memory NVML reports
	cc      uint32
	weight  int
	lo, hi  uint64 // cents per GPU-hour
	counts  []uint32
	link    string
	catalog string // the catalog ID NVML's name must map to
}

var consumerCounts = []uint32{1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 10, 16}
var dcCounts = []uint32{1, 2, 4, 8, 8, 8}

var realGPUs = []realGPU{
	{"NVIDIA GeForce RTX 4090", 24564, 89, 250, 25, 70, consumerCounts, "pcie", "RTX 4090"},
	{"NVIDIA GeForce RTX 3090", 24576, 86, 120, 12, 35, consumerCounts, "pcie", "RTX 3090"},
	{"NVIDIA GeForce RTX 5090", 32607, 120, 80, 45, 95, consumerCounts, "pcie", "RTX 5090"},
	{"NVIDIA GeForce RTX 3080", 10240, 86, 40, 8, 20, consumerCounts, "pcie", "RTX 3080"},
	{"NVIDIA GeForce RTX 4080", 16376, 89, 40, 15, 35, consumerCounts, "pcie", "RTX 4080"},
	{"NVIDIA GeForce RTX 5080", 16303, 120, 30, 20, 40, consumerCounts, "pcie", "RTX 5080"},
	{"NVIDIA GeForce RTX 3060", 12288, 86, 20, 5, 12, consumerCounts, "pcie", "RTX 3060"},
	{"NVIDIA GeForce RTX 5060 Ti", 16311, 120, 20, 8, 18, consumerCounts, "pcie", "RTX 5060 Ti"},
	{"NVIDIA RTX A6000", 49140, 86, 60, 35, 80, consumerCounts, "pcie", "RTX A6000"},
	{"NVIDIA RTX 6000 Ada Generation", 49140, 89, 40, 60, 110, consumerCounts, "pcie", "RTX 6000 Ada"},
	{"NVIDIA RTX A5000", 24564, 86, 30, 18, 40, consumerCounts, "pcie", "RTX A5000"},
	{"NVIDIA RTX A4000", 16376, 86, 20, 10, 25, consumerCounts, "pcie", "RTX A4000"},
	{"NVIDIA H100 80GB HBM3", 81559, 90, 60, 180, 320, dcCounts, "sxm", "H100 SXM"},
	{"NVIDIA H100 PCIe", 81559, 90, 20, 150, 250, dcCounts, "pcie", "H100 PCIe"},
	{"NVIDIA H100 NVL", 95830, 90, 10, 180, 280, dcCounts, "nvlink", "H100 NVL"},
	{"NVIDIA A100-SXM4-80GB", 81920, 80, 40, 90, 180, dcCounts, "sxm", "A100 SXM 80GB"},
	{"NVIDIA A100-PCIE-40GB", 40960, 80, 20, 60, 120, dcCounts, "pcie", "A100 PCIe 40GB"},
	{"NVIDIA L40S", 46068, 89, 30, 70, 130, dcCounts, "pcie", "L40S"},
	{"NVIDIA H200", 143771, 90, 20, 250, 400, dcCounts, "sxm", "H200 SXM"},
	{"NVIDIA A10", 23028, 86, 10, 40, 90, dcCounts, "pcie", "A10"},
	{"NVIDIA L4", 23034, 89, 10, 30, 70, dcCounts, "pcie", "L4"},
	{"Tesla V100-SXM2-32GB", 32768, 70, 10, 20, 60, dcCounts, "sxm", "V100 SXM2 32GB"},
	{"Tesla T4", 15360, 75, 10, 10, 30, dcCounts, "pcie", "T4"},
	{"NVIDIA B200", 183359, 100, 10, 400, 600, dcCounts, "sxm", "B200"},
}

// realCountries are weighted as such a market is: most in the US and
// Europe.
var realCountries = []string{"US", "US", "US", "US", "US", "CA", "DE", "DE", "FR", "NL", "GB", "SE", "FI", "PL", "ES", "IT", "NO", "CZ", "JP", "KR", "SG", "IN", "AU", "BR", "TW", "HK", "CN", "RO", "UA", "VN"}

func pickRealGPU(r *rand.Rand) realGPU {
	return pickWeighted(r, realGPUs, func(g realGPU) int { return g.weight })
}

// realOffer is one machine's offer: its GPUs (one model; rarely a second
// group of another), a host scaled to them, a cent-quantised price, and
// the windows benchWindows gives.
func realOffer(r *rand.Rand, issuer peer.ID, id string, now time.Time) *pb.Offer {
	return realOfferOf(r, pickRealGPU, issuer, id, now)
}

// realOfferOf is realOffer with its GPUs drawn by pickGPU.
func realOfferOf(r *rand.Rand, pickGPU func(*rand.Rand) realGPU, issuer peer.ID, id string, now time.Time) *pb.Offer {
	g := pickGPU(r)
	n := pick(r, g.counts)
	cents := g.lo + r.Uint64N(g.hi-g.lo+1)
	if r.IntN(3) == 0 {
		cents = (cents + 4) / 5 * 5 // many ask a round five cents
	}
	price := cents * 10_000
	group := func(g realGPU, n uint32) *pb.GPUGroup {
		return &pb.GPUGroup{Model: g.nvml, Count: n, VramBytes: g.mib << 20, ComputeCapability: g.cc, Interconnect: g.link}
	}
	o := &pb.Offer{
		Header: benchHeader(r, issuer, id, now),
		Gpus:   []*pb.GPUGroup{group(g, n)},
		Host: &pb.HostSpec{
			CpuCores:          n * uint32(4<<r.IntN(4)),                // 4-32 per GPU
			RamBytes:          uint64(n) * uint64(16<<r.IntN(4)) << 30, // 16-128 GiB per GPU
			DiskBytes:         uint64(n) * uint64(100<<r.IntN(5)) << 30,
			UpBitsPerSecond:   uint64(100<<r.IntN(7)) * 1e6, // 100 Mbit/s to 6.4 Gbit/s
			DownBitsPerSecond: uint64(100<<r.IntN(7)) * 1e6,
		},
		Region:             &pb.Region{Country: pick(r, realCountries), Label: "dc-" + strconv.Itoa(r.IntN(9))},
		PriceMicros:        price,
		MinDurationSeconds: 600,
		PowerCapWatts:      450,
	}
	if r.IntN(20) == 0 && n > 1 { // a second group of another model
		o.Gpus = append(o.Gpus, group(pickGPU(r), 1+uint32(r.IntN(2))))
	}
	switch r.IntN(20) {
	case 0, 1:
		o.GpusWhole = true
	case 2, 3:
		o.GpuStep = 2
	case 4:
		o.HostWhole = true
	}
	o.TierPrices = []*pb.TierPrice{{Tier: pb.Tier_TIER_GOLD, MicrosPerGpuHour: cents * 13 / 10 * 10_000}, {Tier: pb.Tier_TIER_BRONZE, MicrosPerGpuHour: cents * 6 / 10 * 10_000}}
	benchTerms(r, o, now)
	return o
}

// realMarket is a realistic book of n offers from n/3 issuers, and the
// sources that rate them.
func realMarket(tb testing.TB, n int) (*Book, benchSources) {
	peers := benchPeers(max(1, n/3), uint64(n)+7)
	r := rand.New(rand.NewChaCha8(seedBytes(uint64(n) + 8)))
	b := NewBook()
	for i := range n {
		o := realOffer(r, peers[i%len(peers)], "m"+strconv.Itoa(i), benchNow)
		if err := DefaultLimits().ValidateOffer(o, benchNow); err != nil {
			tb.Fatalf("offer %d: %v", i, err)
		}
		if err := b.PutOffer(o, benchNow); err != nil {
			tb.Fatal(err)
		}
	}
	return b, newBenchSources(peers, uint64(n)+9)
}

// requestShape is one kind of request renters make of such a book.
type requestShape struct {
	name string
	bid  func(b *pb.Bid)
}

// requestShapes are the kinds of request the matcher must answer fast:
// named models and families, no model at all, memory only, host
// minimums, a split across providers, a region, and a start window.
var requestShapes = []requestShape{
	{"typical", func(b *pb.Bid) { // four H100 or A100 in Europe
		b.Gpu = &pb.GPURequirement{Models: []string{"H100", "A100"}, MinVramBytes: 40 << 30, MinComputeCapability: 80, Count: 4}
		b.HostMin = &pb.HostSpec{CpuCores: 16, RamBytes: 128 << 30}
		b.MaxPriceMicros = 2_500_000
		b.RegionsAllowed = []string{"DE", "FR", "NL", "SE", "FI", "PL", "ES", "IT", "NO", "CZ"}
	}},
	{"no-model", func(b *pb.Bid) { // 4 GPUs of 48 GB or more, cheapest
		b.Gpu = &pb.GPURequirement{MinVramBytes: 48 << 30, Count: 4}
		b.MaxPriceMicros = 5_000_000
	}},
	{"vram-only", func(b *pb.Bid) { // one GPU of 24 GB or more
		b.Gpu = &pb.GPURequirement{MinVramBytes: 24 << 30, Count: 1}
		b.MaxPriceMicros = 1_000_000
	}},
	{"host", func(b *pb.Bid) { // one 4090 with a big share of its host
		b.Gpu = &pb.GPURequirement{Models: []string{"rtx-4090"}, Count: 1}
		b.HostMin = &pb.HostSpec{CpuCores: 16, RamBytes: 32 << 30, DiskBytes: 500 << 30, DownBitsPerSecond: 1e9}
		b.MaxPriceMicros = 1_000_000
	}},
	{"split", func(b *pb.Bid) { // 32 H100s, at least 4 per provider
		b.Gpu = &pb.GPURequirement{Models: []string{"H100"}, Count: 32, MinPerProvider: 4}
		b.MaxPriceMicros = 3_500_000
	}},
	{"region", func(b *pb.Bid) { // any 16 GB GPU in East Asia
		b.Gpu = &pb.GPURequirement{MinVramBytes: 16 << 30, Count: 1}
		b.RegionsAllowed = []string{"JP", "KR", "TW"}
		b.MaxPriceMicros = 2_000_000
	}},
	{"windows", func(b *pb.Bid) { // two 24 GB GPUs overnight, from this evening
		b.Gpu = &pb.GPURequirement{MinVramBytes: 24 << 30, Count: 2}
		b.EarliestStartUnixMs = benchNow.Add(7 * time.Hour).UnixMilli()
		b.LatestStartUnixMs = benchNow.Add(9 * time.Hour).UnixMilli()
		b.DurationSeconds = 10 * 3600
		b.MaxPriceMicros = 1_500_000
	}},
	{"sxm-nvlink", func(b *pb.Bid) { // a whole SXM machine of eight
		b.Gpu = &pb.GPURequirement{FormFactor: "SXM", Nvlink: true, Count: 8, MinVramBytes: 80 << 30}
		b.MaxPriceMicros = 6_000_000
	}},
}

// shapeBid is the bid of a shape: training, silver, USD, four hours from
// now within six, 90% reliable, RTT under 150 ms, unless the shape says
// otherwise.
func shapeBid(s requestShape, issuer peer.ID, now time.Time) *pb.Bid {
	b := &pb.Bid{
		Header: &pb.Header{Version: Version, Issuer: []byte(issuer), Id: s.name, Seq: 1,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Tier:                   pb.Tier_TIER_SILVER,
		Currency:               "USD",
		DurationSeconds:        4 * 3600,
		EarliestStartUnixMs:    now.UnixMilli(),
		LatestStartUnixMs:      now.Add(6 * time.Hour).UnixMilli(),
		MaxRttMs:               150,
		MinReliabilityPermille: 900,
		WorkloadClass:          "training",
	}
	s.bid(b)
	return b
}

// TestRealNamesReachTheCatalog: every NVML name of the realistic book
// maps to the catalog model it is.
func TestRealNamesReachTheCatalog(t *testing.T) {
	for _, g := range realGPUs {
		if got := gpus.Default().ModelName(g.nvml, 0); got != g.catalog {
			t.Errorf("%q reads as %q, want %q", g.nvml, got, g.catalog)
		}
	}
}

// TestEveryShapeMatchesTheScan: for each request shape, on a realistic
// book, Match returns exactly the scan's first k, finds some, and
// Explain's counts agree with a whole walk.
func TestEveryShapeMatchesTheScan(t *testing.T) {
	book, src := realMarket(t, 4000)
	snap := book.Snapshot()
	m := NewMatcher(DefaultMatchConfig(), src, src)
	renter := benchPeers(1, 99)[0]
	for _, s := range requestShapes {
		t.Run(s.name, func(t *testing.T) {
			bid := shapeBid(s, renter, benchNow)
			if err := DefaultLimits().ValidateBid(bid, benchNow); err != nil {
				t.Fatal(err)
			}
			for _, k := range []int{1, 10, 0} {
				res := m.Match(snap, bid, benchNow, k)
				ref := scanMatch(m, snap, bid, benchNow, k)
				if len(ref) == 0 {
					t.Fatalf("k=%d: the scan finds nothing: the shape tests no ranking: %s", k, m.Explain(snap, bid, benchNow))
				}
				if !slices.EqualFunc(res.Candidates, ref, sameCandidate) {
					t.Fatalf("k=%d: match lists %d candidates, the scan %d, or in another order", k, len(res.Candidates), len(ref))
				}
				if k == 0 {
					ex := m.Explain(snap, bid, benchNow)
					if ex.Feasible != res.Feasible || ex.Offers != snap.Len() {
						t.Fatalf("Explain: %d of %d feasible; a whole walk: %d of %d", ex.Feasible, ex.Offers, res.Feasible, snap.Len())
					}
				}
			}
			// Explain answers per bucket where it can: its counts, examples
			// and nearest models must be the scan's, for the request and
			// for the same request when nothing fits.
			empty := shapeBid(s, renter, benchNow)
			empty.MaxPriceMicros = 1
			for _, bid := range []*pb.Bid{bid, empty} {
				if got, want := m.Explain(snap, bid, benchNow), scanExplain(m, snap, bid, benchNow); !equalExplanations(got, want) {
					t.Fatalf("Explain:\n%+v\nthe scan's:\n%+v", got, want)
				}
			}
		})
	}
}

// scanExplain is the reference Explain: every check on every offer, in
// key order; each reason's example the first offer of the least price
// for the bid's tier (none: the most) that fails it.
func scanExplain(m *Matcher, s *Snapshot, bid *pb.Bid, now time.Time) Explanation {
	p := m.plan(bid, now)
	ex := Explanation{Offers: s.Len()}
	var counts [len(feasibilityChecks)]ReasonCount
	var best [len(feasibilityChecks)]uint64
	near := map[string]*ModelMiss{}
	for _, e := range s.entries() {
		_, i := m.evaluate(new(evalCtx), e, nil, p, false)
		if i < 0 {
			ex.Feasible++
			continue
		}
		if i == checkModel {
			missModels(near, e, bid.GetTier())
		}
		price := uint64(math.MaxUint64)
		if e.offers(bid.GetTier()) {
			price = e.prices[bid.GetTier()]
		}
		if counts[i].Count == 0 || price < best[i] {
			r := m.reason(e, nil, p, i)
			counts[i].Check, counts[i].Kind, counts[i].Example, best[i] = r.Check, r.Kind, r.Detail, price
		}
		counts[i].Count++
	}
	for _, rc := range counts {
		if rc.Count > 0 {
			ex.Reasons = append(ex.Reasons, rc)
		}
	}
	sortReasonCounts(ex.Reasons)
	ex.further(p, near, func(check string) *relaxed { return scanRelax(m, s, bid, check, now) })
	return ex
}

// scanRelax is the reference of Matcher.relax: every check on every
// offer, the check moved.
func scanRelax(m *Matcher, s *Snapshot, bid *pb.Bid, check string, now time.Time) *relaxed {
	byPrice, p := m.relaxedPlan(bid, check, now)
	r := newRelaxed()
	for _, e := range s.entries() {
		ctx := new(evalCtx)
		if c, i := byPrice.evaluate(ctx, e, nil, p, false); i < 0 {
			r.add(c, e, ctx)
		}
	}
	return r
}

// equalExplanations compares all but the blockers' nearest offers, of
// which the index takes those of one price in no set order.
func equalExplanations(a, b Explanation) bool {
	blockers := a.Blocker == nil && b.Blocker == nil || a.Blocker != nil && b.Blocker != nil &&
		a.Blocker.Check == b.Blocker.Check && a.Blocker.Kind == b.Blocker.Kind && a.Blocker.Fit == b.Blocker.Fit && a.Blocker.Figure == b.Blocker.Figure
	return a.Offers == b.Offers && a.Feasible == b.Feasible && slices.Equal(a.Reasons, b.Reasons) && slices.Equal(a.Nearest, b.Nearest) && blockers
}

// refChase is the reference of BenchmarkMatchShapes: 20,000 dependent
// loads at random over 128 MiB (a few hundred µs, each load a miss in the
// caches a match misses in), the same every time.
func refChase() {
	ring := refRing()
	i := uint32(0)
	for range 20000 {
		i = ring[i]
	}
	refSink = i
}

// refRing is one cycle through 32M slots in random order, built on first
// use: at package init, every test binary of the package (and every fuzz
// worker it starts) would spend seconds and 384 MiB on it.
var refRing = sync.OnceValue(func() []uint32 {
	const n = 32 << 20
	perm := rand.New(rand.NewChaCha8([32]byte{1})).Perm(n)
	ring := make([]uint32, n)
	for k := range n {
		ring[perm[k]] = uint32(perm[(k+1)%n])
	}
	return ring
})

var refSink uint32

// BenchmarkMatchShapes reports, for each request shape on realistic
// books of 10k and 100k offers, Match's p50 and p99 latency beside a
// linear scan's (every check on every offer, then a sort) in the same
// run, and scan-p50/match-p50 ("speedup"; below 1 a shape is slower than
// the scan); and Explain's p50 and p99, for the request and for the same
// request when nothing fits (every offer dearer than it pays: what
// Explain is for), each timed in its own loop; and a fixed reference
// work's p50 and p99 (refChase), the machine's own noise. Targets at 100k: match
// p99 under 1 ms and speedup ≥ 1 for every shape; Explain p99 under 5 ms
// where nothing fits.
func BenchmarkMatchShapes(b *testing.B) {
	refRing() // built before any timing
	for _, n := range []int{10_000, 100_000} {
		book, src := realMarket(b, n)
		snap := book.Snapshot()
		m := NewMatcher(DefaultMatchConfig(), src, src)
		renter := benchPeers(1, 99)[0]
		for _, s := range requestShapes {
			b.Run(fmt.Sprintf("offers=%dk/shape=%s", n/1000, s.name), func(b *testing.B) {
				bid := shapeBid(s, renter, benchNow)
				const k = 10
				res := m.Match(snap, bid, benchNow, k)
				if len(res.Candidates) == 0 {
					b.Fatalf("nothing matches: %s", m.Explain(snap, bid, benchNow))
				}
				runtime.GC() // the book's building is not the walk's to pay for
				lat := matchLatencies(b, m, snap, bid, k)
				// What Explain is for: the same request when nothing fits,
				// here as every offer is dearer than it pays.
				empty := shapeBid(s, renter, benchNow)
				empty.MaxPriceMicros = 1
				if ex := m.Explain(snap, empty, benchNow); ex.Feasible != 0 {
					b.Fatalf("%d feasible at 1 µ$", ex.Feasible)
				}
				// Each in its own loop, as Match's: one after another.
				rounds := max(20, min(200, 2_000_000/n))
				times := func(f func()) []time.Duration {
					ds := make([]time.Duration, rounds)
					for i := range ds {
						t0 := time.Now()
						f()
						ds[i] = time.Since(t0)
					}
					return ds
				}
				scan := times(func() { scanMatch(m, snap, bid, benchNow, k) })
				explain := times(func() { m.Explain(snap, bid, benchNow) })
				explainEmpty := times(func() { m.Explain(snap, empty, benchNow) })
				// The machine's own noise: a fixed piece of work about as
				// long as a match, and as bound by memory, whose p99 over
				// its p50 is what a shared machine adds to a latency of
				// that size and kind.
				ref := times(refChase)
				r50, r99 := percentiles(ref)
				b.ReportMetric(r50, "ref-p50-µs")
				b.ReportMetric(r99, "ref-p99-µs")
				reportLatencies(b, lat, scan)
				e50, e99 := percentiles(explain)
				z50, z99 := percentiles(explainEmpty)
				b.ReportMetric(e50, "explain-p50-µs")
				b.ReportMetric(e99, "explain-p99-µs")
				b.ReportMetric(z50, "explain-empty-p50-µs")
				b.ReportMetric(z99, "explain-empty-p99-µs")
				b.ReportMetric(float64(res.Considered), "considered")
			})
		}
	}
}
