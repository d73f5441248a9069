package market

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// benchNow is the fixed clock of the benchmarks: a Monday noon, UTC.
var benchNow = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

// benchGPU is a GPU model with its market: VRAM choices, compute
// capability, price range per GPU-hour in USD micros, and weight.
type benchGPU struct {
	model    string
	vramGiB  []uint64
	cc       uint32
	lo, hi   uint64
	weight   int
	counts   []uint32
	interObj string
}

var benchGPUs = []benchGPU{
	{"H100", []uint64{80}, 90, 1_800_000, 3_500_000, 14, []uint32{1, 2, 4, 8}, "sxm"},
	{"A100", []uint64{40, 80}, 80, 900_000, 2_000_000, 16, []uint32{1, 2, 4, 8}, "nvlink"},
	{"L40S", []uint64{48}, 89, 700_000, 1_300_000, 10, []uint32{1, 2, 4}, "pcie"},
	{"RTX4090", []uint64{24}, 89, 250_000, 700_000, 22, []uint32{1, 2}, "pcie"},
	{"RTX3090", []uint64{24}, 86, 150_000, 400_000, 12, []uint32{1, 2}, "pcie"},
	{"A10G", []uint64{24}, 86, 400_000, 900_000, 6, []uint32{1, 4}, "pcie"},
	{"L4", []uint64{24}, 89, 300_000, 700_000, 6, []uint32{1, 2, 4}, "pcie"},
	{"V100", []uint64{16, 32}, 70, 200_000, 600_000, 5, []uint32{1, 4, 8}, "nvlink"},
	{"T4", []uint64{16}, 75, 100_000, 300_000, 5, []uint32{1, 4}, "pcie"},
	{"MI300X", []uint64{192}, 94, 2_000_000, 3_800_000, 4, []uint32{8}, "xgmi"},
}

var benchCountries = []string{"US", "US", "US", "DE", "DE", "FR", "NL", "GB", "SE", "FI", "PL", "ES", "IT", "CA", "JP", "SG", "IN", "BR", "KR", "AU"}

// benchPeers returns n distinct peer IDs, deterministic in seed; they are
// derived from random public key bytes (no curve arithmetic needed).
func benchPeers(n int, seed uint64) []peer.ID {
	r := rand.New(rand.NewChaCha8(seedBytes(seed)))
	ids := make([]peer.ID, n)
	for i := range ids {
		var b [32]byte
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		pk, err := crypto.UnmarshalEd25519PublicKey(b[:])
		if err != nil {
			panic(err)
		}
		if ids[i], err = peer.IDFromPublicKey(pk); err != nil {
			panic(err)
		}
	}
	return ids
}

func seedBytes(seed uint64) [32]byte {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// benchOffer makes a realistic valid offer: one or two GPU groups, a
// host, a country, tier prices, and for most offers weekly or one-off
// windows.
func benchOffer(r *rand.Rand, issuer peer.ID, id string, now time.Time) *pb.Offer {
	g := benchPickGPU(r)
	price := g.lo + r.Uint64N(g.hi-g.lo)
	o := &pb.Offer{
		Header: benchHeader(r, issuer, id, now),
		Gpus:   []*pb.GPUGroup{benchGroup(r, g)},
		Host: &pb.HostSpec{CpuCores: uint32(8 << r.IntN(5)), RamBytes: uint64(32<<r.IntN(6)) << 30, DiskBytes: uint64(500<<r.IntN(4)) << 30,
			UpBitsPerSecond: 1e9, DownBitsPerSecond: 1e9},
		Region:             &pb.Region{Country: pick(r, benchCountries), Label: "dc-" + strconv.Itoa(r.IntN(9))},
		PriceMicros:        price,
		MinDurationSeconds: 3600,
		PowerCapWatts:      350,
	}
	if r.IntN(10) == 0 { // a second group of another model
		o.Gpus = append(o.Gpus, benchGroup(r, benchPickGPU(r)))
	}
	o.TierPrices = []*pb.TierPrice{{Tier: pb.Tier_TIER_GOLD, MicrosPerGpuHour: price * 13 / 10}, {Tier: pb.Tier_TIER_BRONZE, MicrosPerGpuHour: price * 6 / 10}}
	benchTerms(r, o, now)
	return o
}

func benchHeader(r *rand.Rand, issuer peer.ID, id string, now time.Time) *pb.Header {
	return &pb.Header{Version: Version, Issuer: []byte(issuer), Id: id, Seq: 1 + r.Uint64N(50),
		CreatedUnixMs: now.Add(-10 * time.Minute).UnixMilli(), ExpiresUnixMs: now.Add(time.Duration(1+r.IntN(23)) * time.Hour).UnixMilli()}
}

// benchTerms gives o the rest of an offer's terms: a coordinate, USD,
// a longest lease, tiers, workload classes and image rules for some, an
// attestation hash, and windows (benchWindows).
func benchTerms(r *rand.Rand, o *pb.Offer, now time.Time) {
	o.Coordinate = &pb.NetworkCoordinate{Vec: []float64{r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64()}, Error: 0.2, Height: 0.001}
	o.Currency = "USD"
	o.MaxDurationSeconds = uint64(24+r.IntN(700)) * 3600
	o.BronzeNoticeSeconds = 300
	for _, t := range []pb.Tier{pb.Tier_TIER_GOLD, pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE} {
		if r.IntN(3) > 0 || t == pb.Tier_TIER_SILVER && len(o.Tiers) == 0 {
			o.Tiers = append(o.Tiers, t)
		}
	}
	if r.IntN(2) == 0 {
		o.WorkloadClasses = []string{"training", "inference", "batch"}[:1+r.IntN(3)]
	}
	if r.IntN(4) == 0 {
		o.ImageAllow = []string{"docker.io/", "ghcr.io/", "nvcr.io/"}[:1+r.IntN(3)]
		o.ImageDeny = []string{"docker.io/library/ubuntu"}
	}
	o.AttestationHash = make([]byte, 32)
	for i := range o.AttestationHash {
		o.AttestationHash[i] = byte(r.Uint32())
	}
	benchWindows(r, o, now)
}

func benchPickGPU(r *rand.Rand) benchGPU {
	return pickWeighted(r, benchGPUs, func(g benchGPU) int { return g.weight })
}

// pickWeighted picks one of xs, each as often as its weight.
func pickWeighted[T any](r *rand.Rand, xs []T, weight func(T) int) T {
	total := 0
	for _, x := range xs {
		total += weight(x)
	}
	n := r.IntN(total)
	for _, x := range xs {
		if n -= weight(x); n < 0 {
			return x
		}
	}
	return xs[0]
}

func benchGroup(r *rand.Rand, g benchGPU) *pb.GPUGroup {
	return &pb.GPUGroup{Model: g.model, Count: pick(r, g.counts), VramBytes: pick(r, g.vramGiB) << 30,
		ComputeCapability: g.cc, Interconnect: g.interObj}
}

// benchWindows gives 40% of offers no windows (always available), 35%
// weekly windows (weeknights and weekends), 25% one-off windows.
func benchWindows(r *rand.Rand, o *pb.Offer, now time.Time) {
	switch n := r.IntN(20); {
	case n < 8:
	case n < 15:
		night := uint32(18 + r.IntN(4))
		for d := uint32(0); d < 5; d++ {
			o.Weekly = append(o.Weekly, &pb.WeeklyWindow{StartMinute: d*1440 + night*60, EndMinute: (d+1)*1440 + 7*60})
		}
		o.Weekly = append(o.Weekly, &pb.WeeklyWindow{StartMinute: 5*1440 + 7*60, EndMinute: 7 * 1440, FloorMicros: o.PriceMicros / 2})
	default:
		start := now.Add(time.Duration(r.IntN(12)) * time.Hour)
		for i := range 1 + r.IntN(3) {
			s := start.Add(time.Duration(i*12) * time.Hour)
			o.Windows = append(o.Windows, &pb.Interval{StartUnixMs: s.UnixMilli(), EndUnixMs: s.Add(time.Duration(2+r.IntN(10)) * time.Hour).UnixMilli()})
		}
	}
}

// benchBid is a typical bid: four H100 or A100 with 40 GiB or more for
// four hours, silver, in Europe, starting within six hours.
func benchBid(issuer peer.ID, now time.Time) *pb.Bid {
	return &pb.Bid{
		Header: &pb.Header{Version: Version, Issuer: []byte(issuer), Id: "typical", Seq: 1,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpu:                    &pb.GPURequirement{Models: []string{"H100", "A100"}, MinVramBytes: 40 << 30, MinComputeCapability: 80, Count: 4},
		HostMin:                &pb.HostSpec{CpuCores: 16, RamBytes: 128 << 30},
		Tier:                   pb.Tier_TIER_SILVER,
		Currency:               "USD",
		MaxPriceMicros:         2_500_000,
		DurationSeconds:        4 * 3600,
		EarliestStartUnixMs:    now.UnixMilli(),
		LatestStartUnixMs:      now.Add(6 * time.Hour).UnixMilli(),
		RegionsAllowed:         []string{"DE", "FR", "NL", "SE", "FI", "PL", "ES", "IT"},
		MaxRttMs:               80,
		MinReliabilityPermille: 900,
		WorkloadClass:          "training",
		Image:                  "docker.io/pytorch/pytorch:2.5.1-cuda12.4",
	}
}

// benchSources are reliability in [0.85, 1] for every peer and an RTT
// known for 70% of them, 5-200 ms.
type benchSources struct {
	rel map[peer.ID]float64
	rtt map[peer.ID]time.Duration
}

func (s benchSources) Reliability(p peer.ID) float64 {
	if v, ok := s.rel[p]; ok {
		return v
	}
	return 1
}

func (s benchSources) RTT(p peer.ID) (time.Duration, bool) {
	d, ok := s.rtt[p]
	return d, ok
}

func newBenchSources(peers []peer.ID, seed uint64) benchSources {
	r := rand.New(rand.NewChaCha8(seedBytes(seed)))
	s := benchSources{rel: map[peer.ID]float64{}, rtt: map[peer.ID]time.Duration{}}
	for _, p := range peers {
		s.rel[p] = 0.85 + 0.15*r.Float64()
		if r.IntN(10) < 7 {
			s.rtt[p] = time.Duration(5+r.IntN(195)) * time.Millisecond
		}
	}
	return s
}

// benchMarket is a filled book of n offers from n/5 issuers, and the
// sources that rate them.
func benchMarket(tb testing.TB, n int) (*Book, benchSources) {
	peers := benchPeers(max(1, n/5), uint64(n))
	r := rand.New(rand.NewChaCha8(seedBytes(uint64(n) + 1)))
	b := NewBook()
	for i := range n {
		o := benchOffer(r, peers[i%len(peers)], "o"+strconv.Itoa(i), benchNow)
		if err := b.PutOffer(o, benchNow); err != nil {
			tb.Fatal(err)
		}
	}
	return b, newBenchSources(peers, uint64(n)+2)
}

// scanMatch is the reference matcher: every check on every offer, then a
// full sort. Match must return exactly its first k.
func scanMatch(m *Matcher, s *Snapshot, bid *pb.Bid, now time.Time, k int) []Candidate {
	p := m.plan(bid, now)
	var all []Candidate
	ctx := new(evalCtx)
	for _, e := range s.entries() {
		if c, failed := m.evaluate(ctx, e, nil, p, false); failed < 0 {
			all = append(all, c)
		}
	}
	slices.SortFunc(all, func(a, b Candidate) int { return compareCandidates(&a, &b) })
	if !p.split { // a provider once: its best offer
		seen := map[peer.ID]bool{}
		all = slices.DeleteFunc(all, func(c Candidate) bool {
			dup := seen[c.Issuer]
			seen[c.Issuer] = true
			return dup
		})
	}
	if k > 0 && len(all) > k {
		all = all[:k]
	}
	return all
}

// percentiles returns the p50 and p99 of ds in µs.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))]) / 1e3 }
	return at(0.50), at(0.99)
}

// BenchmarkMatch reports per-match latency at p50 and p99 for books of 1k,
// 10k and 100k offers and a typical bid, beside a linear scan that runs
// every check on every offer and sorts, and the speedup (scan p50 / match
// p50). Targets: p99 < 1 ms at 100k, speedup ≥ 20×.
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("offers=%dk", n/1000), func(b *testing.B) {
			book, src := benchMarket(b, n)
			snap := book.Snapshot()
			m := NewMatcher(DefaultMatchConfig(), src, src)
			bid := benchBid(benchPeers(1, 99)[0], benchNow)
			const k = 10
			res := m.Match(snap, bid, benchNow, k)
			ref := scanMatch(m, snap, bid, benchNow, k)
			if !slices.EqualFunc(res.Candidates, ref, sameCandidate) || len(ref) == 0 && n >= 10_000 {
				b.Fatalf("match found %d, scan %d candidates", len(res.Candidates), len(ref))
			}
			lat := matchLatencies(b, m, snap, bid, k)
			scan := make([]time.Duration, max(20, min(200, 2_000_000/n)))
			for i := range scan {
				t0 := time.Now()
				scanMatch(m, snap, bid, benchNow, k)
				scan[i] = time.Since(t0)
			}
			reportLatencies(b, lat, scan)
			b.ReportMetric(float64(res.Considered), "considered")
			b.ReportMetric(float64(res.Feasible), "feasible")
		})
	}
}

// matchLatencies runs Match in b's loop and returns each one's latency.
func matchLatencies(b *testing.B, m *Matcher, snap *Snapshot, bid *pb.Bid, k int) []time.Duration {
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now() // benchmarks may read the clock; the package never does
		m.Match(snap, bid, benchNow, k)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	return lat
}

// reportLatencies reports the p50 and p99 of Match and of the scan, and
// scan-p50/match-p50 as "speedup".
func reportLatencies(b *testing.B, match, scan []time.Duration) {
	p50, p99 := percentiles(match)
	s50, s99 := percentiles(scan)
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
	b.ReportMetric(s50, "scan-p50-µs")
	b.ReportMetric(s99, "scan-p99-µs")
	b.ReportMetric(s50/p50, "speedup")
}

// BenchmarkIngestOffer measures, per op, what a node does with an offer
// it receives: Open (envelope and Ed25519 signature), ValidateOffer with
// DefaultLimits, and Book.PutOffer, on envelopes pre-signed by 16 issuer
// keys. Interleaved with it in the same loop, it times a raw Ed25519
// verify (libp2p's PubKey.Verify) by the same keys over a message as long
// as what the envelope signs. It reports offers/s, verifies/s and
// ingest/raw (target ≥ 0.9); ns/op counts both halves.
func BenchmarkIngestOffer(b *testing.B) {
	const nEnv = 4096
	envs, raws := ingestFixtures(b, nEnv)
	limits := DefaultLimits()
	book := NewBook()
	var ingest, verify time.Duration
	i := 0
	for b.Loop() {
		j := i % nEnv
		if j == 0 && i > 0 {
			book = NewBook() // every put an insert, into a book of up to nEnv offers
		}
		t0 := time.Now()
		o, err := Open[*pb.Offer](envs[j])
		if err == nil {
			err = limits.ValidateOffer(o, benchNow)
		}
		if err == nil {
			err = book.PutOffer(o, benchNow)
		}
		t1 := time.Now()
		ok, verr := raws[j].pub.Verify(raws[j].msg, raws[j].sig)
		t2 := time.Now()
		if err != nil || !ok || verr != nil {
			b.Fatalf("ingest: %v; raw verify: %v %v", err, ok, verr)
		}
		ingest, verify, i = ingest+t1.Sub(t0), verify+t2.Sub(t1), i+1
	}
	offersPerSec := float64(i) / ingest.Seconds()
	verifiesPerSec := float64(i) / verify.Seconds()
	b.ReportMetric(offersPerSec, "offers/s")
	b.ReportMetric(verifiesPerSec, "verifies/s")
	b.ReportMetric(offersPerSec/verifiesPerSec, "ingest/raw")
}

// rawSigned is a message as long as an offer envelope's signed bytes,
// signed by the offer's issuer.
type rawSigned struct {
	pub      crypto.PubKey
	msg, sig []byte
}

// ingestFixtures signs n realistic offers with 16 Ed25519 keys made from
// a seeded ChaCha8, and for each a raw message of the same length.
func ingestFixtures(b *testing.B, n int) ([][]byte, []rawSigned) {
	const nKeys = 16
	keyRand := rand.NewChaCha8(seedBytes(42))
	keys := make([]crypto.PrivKey, nKeys)
	ids := make([]peer.ID, nKeys)
	for i := range keys {
		var err error
		if keys[i], _, err = crypto.GenerateEd25519Key(keyRand); err != nil {
			b.Fatal(err)
		}
		ids[i], _ = peer.IDFromPrivateKey(keys[i])
	}
	r := rand.New(rand.NewChaCha8(seedBytes(43)))
	envs, raws := make([][]byte, n), make([]rawSigned, n)
	for i := range envs {
		key := keys[i%nKeys]
		o := benchOffer(r, ids[i%nKeys], "o"+strconv.Itoa(i), benchNow)
		env, err := Sign(key, o)
		if err != nil {
			b.Fatal(err)
		}
		payload, _ := proto.MarshalOptions{Deterministic: true}.Marshal(o)
		msg := make([]byte, len(payload)+len(OfferDomain)+len(offerCodec)+6) // what record.Seal signs
		keyRand.Read(msg)
		sig, _ := key.Sign(msg)
		envs[i], raws[i] = env, rawSigned{key.GetPublic(), msg, sig}
	}
	return envs, raws
}

// BenchmarkSnapshotAfterPut measures the price of the snapshot strategy
// at its worst: a reader takes a snapshot after every write, in a book of
// 100k offers. Each op replaces one offer and snapshots, so it copies one
// key shard and merges one bucket.
func BenchmarkSnapshotAfterPut(b *testing.B) {
	book, _ := benchMarket(b, 100_000)
	book.Snapshot()
	peers := benchPeers(20_000, 100_000) // benchMarket's issuers
	r := rand.New(rand.NewChaCha8(seedBytes(5)))
	i := 0
	for b.Loop() {
		o := benchOffer(r, peers[i%len(peers)], "o"+strconv.Itoa(i%100_000), benchNow)
		o.Header.Seq = 100 + uint64(i)
		if err := book.PutOffer(o, benchNow); err != nil {
			b.Fatal(err)
		}
		book.Snapshot()
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(i), "µs/put+snapshot")
}

// BenchmarkBookMemory reports the heap the book holds per offer: 100k
// realistic offers decoded from the wire, inserted, and indexed by a
// snapshot. Target ≤ 1 KiB. The figure does not depend on b.N: each run
// measures once (use -benchtime 1x).
func BenchmarkBookMemory(b *testing.B) {
	const n = 100_000
	peers := benchPeers(n/5, 7)
	r := rand.New(rand.NewChaCha8(seedBytes(8)))
	wire := make([][]byte, n)
	var wireBytes int
	for i := range wire {
		var err error
		if wire[i], err = proto.Marshal(benchOffer(r, peers[i%len(peers)], "o"+strconv.Itoa(i), benchNow)); err != nil {
			b.Fatal(err)
		}
		wireBytes += len(wire[i])
	}
	var before, mid, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	book := NewBook()
	for _, w := range wire {
		o := new(pb.Offer)
		if err := proto.Unmarshal(w, o); err != nil {
			b.Fatal(err)
		}
		if err := book.PutOffer(o, benchNow); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&mid)
	snap := book.Snapshot()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(book)
	runtime.KeepAlive(snap)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/offer")
	b.ReportMetric(float64(mid.HeapAlloc-before.HeapAlloc)/n, "B/offer-before-snapshot")
	b.ReportMetric(float64(wireBytes)/n, "wire-B/offer")
}
