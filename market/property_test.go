package market

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// Small domains, so that offers and bids often meet and often tie.
var (
	propPeers     = benchPeers(4, 4321)
	propModels    = []string{"H100", "A100", "L40S", "A100 PCIE"} // a family, a model, a group by memory
	propCountries = []string{"DE", "FR", "US"}
	propTiers     = []pb.Tier{pb.Tier_TIER_GOLD, pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE}
)

// usually draws the usual value about four times in five, else one of the
// others: each constraint alone fails now and then, and together they
// still leave feasible offers in most books.
func usually[V any](t *rapid.T, label string, usual V, others ...V) V {
	if rapid.IntRange(0, 9).Draw(t, label) < 8 {
		return usual
	}
	return rapid.SampledFrom(others).Draw(t, label+"_other")
}

func propPrice(t *rapid.T, label string) uint64 {
	return uint64(rapid.IntRange(1, 6).Draw(t, label)) * 500_000
}

func propOffer(t *rapid.T, issuer peer.ID, id string, seq uint64) *pb.Offer {
	o := mtOffer(issuer, id)
	o.Header.Seq = seq
	o.Header.ExpiresUnixMs = mtNow.Add(time.Duration(usually(t, "expires_min", 120, 10, 30)) * time.Minute).UnixMilli()
	o.Withdrawn = usually(t, "withdrawn", false, true)
	o.Gpus = nil
	for i := range rapid.IntRange(1, 2).Draw(t, "groups") {
		o.Gpus = append(o.Gpus, &pb.GPUGroup{
			Model:             rapid.SampledFrom(propModels).Draw(t, "model"+strconv.Itoa(i)),
			Count:             uint32(usually(t, "count", 8, 1, 2, 4)),
			VramBytes:         usually[uint64](t, "vram", 80<<30, 24<<30, 40<<30, 40e9), // 40e9: not whole GiB
			ComputeCapability: usually[uint32](t, "cc", 90, 80, 86),
		})
	}
	o.Host.CpuCores = usually[uint32](t, "cores", 64, 8, 16)
	o.Host.RamBytes = usually[uint64](t, "ram", 512<<30, 64<<30, 128e9)
	o.Region.Country = rapid.SampledFrom(propCountries).Draw(t, "country")
	o.Currency = usually(t, "currency", "USD", "EUR")
	o.PriceMicros = propPrice(t, "price")
	o.TierPrices = nil
	for _, tier := range propTiers {
		if rapid.Bool().Draw(t, "override") {
			o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: tier, MicrosPerGpuHour: propPrice(t, "tier_price")})
		}
	}
	o.Tiers = propTiers
	if !usually(t, "all_tiers", true, false) {
		o.Tiers = rapid.SliceOfNDistinct(rapid.SampledFrom(propTiers), 1, 3, rapid.ID[pb.Tier]).Draw(t, "tiers")
	}
	o.MinDurationSeconds = usually[uint64](t, "min_h", 1, 2) * 3600
	o.MaxDurationSeconds = usually[uint64](t, "max_h", 48, 4, 8) * 3600
	o.WorkloadClasses = usually(t, "classes", nil, []string{"training"}, []string{"inference"})
	o.ImageAllow = usually(t, "allow", nil, []string{"docker.io/"}, []string{"ghcr.io/"})
	o.ImageDeny = usually(t, "deny", nil, []string{"docker.io/library/"})
	switch rapid.IntRange(0, 2).Draw(t, "windows") {
	case 1:
		propOneOff(t, o)
	case 2:
		propWeekly(t, o)
	}
	return o
}

func propOneOff(t *rapid.T, o *pb.Offer) {
	start := mtNow.Add(time.Duration(rapid.IntRange(-4, 20).Draw(t, "w_start_h")) * time.Hour)
	for range rapid.IntRange(1, 2).Draw(t, "n_windows") {
		end := start.Add(time.Duration(rapid.IntRange(1, 10).Draw(t, "w_len_h")) * time.Hour)
		o.Windows = append(o.Windows, &pb.Interval{StartUnixMs: start.UnixMilli(), EndUnixMs: end.UnixMilli(),
			FloorMicros: usually[uint64](t, "floor", 0, 1_000_000, 2_500_000)})
		start = end.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "w_gap_h")) * time.Hour)
	}
}

func propWeekly(t *rapid.T, o *pb.Offer) {
	from := uint32(rapid.IntRange(0, 6*24).Draw(t, "wk_start_h")) * 60
	to := from + uint32(rapid.IntRange(1, 24).Draw(t, "wk_len_h"))*60
	o.Weekly = []*pb.WeeklyWindow{{StartMinute: from, EndMinute: to, FloorMicros: usually[uint64](t, "wk_floor", 0, 2_000_000)}}
	if rapid.Bool().Draw(t, "wk_wrap") && from >= 120 && to <= minutesPerWeek-120 {
		// A Sunday-night window that runs on into Monday.
		o.Weekly = []*pb.WeeklyWindow{{StartMinute: 0, EndMinute: 120}, o.Weekly[0], {StartMinute: minutesPerWeek - 120, EndMinute: minutesPerWeek}}
	}
}

func propBid(t *rapid.T) *pb.Bid {
	b := mtBid()
	b.Gpu.Models = usually(t, "models", nil, []string{"H100"}, []string{"A100", "L40S"}, []string{"TPU"}, []string{"A100 80GB"}, []string{"A100 PCIe"})
	b.Gpu.MinVramBytes = usually[uint64](t, "min_vram", 0, 40<<30, 80<<30, 40e9)
	b.Gpu.MinComputeCapability = usually[uint32](t, "min_cc", 0, 80, 90)
	b.Gpu.Count = uint32(rapid.IntRange(1, 8).Draw(t, "count"))
	b.Gpu.MinPerProvider = uint32(rapid.IntRange(0, int(b.Gpu.Count)).Draw(t, "min_per_provider"))
	b.Tier = rapid.SampledFrom(propTiers).Draw(t, "tier")
	b.PreemptionOk = usually(t, "preemption_ok", true, false)
	b.Currency = usually(t, "currency", "USD", "EUR")
	b.MaxPriceMicros = usually[uint64](t, "max_price", 3_000_000, 1_000_000, 2_000_000)
	b.DurationSeconds = usually[uint64](t, "hours", 1, 3, 6, 30) * 3600
	b.EarliestStartUnixMs = mtNow.Add(time.Duration(rapid.IntRange(-1, 5).Draw(t, "earliest_h")) * time.Hour).UnixMilli()
	if rapid.Bool().Draw(t, "has_latest") {
		b.LatestStartUnixMs = b.EarliestStartUnixMs + int64(rapid.IntRange(0, 30).Draw(t, "latest_h"))*3_600_000
	}
	b.RegionsAllowed = usually(t, "allowed", nil, []string{"DE"}, []string{"FR", "US"})
	b.RegionsDenied = usually(t, "denied", nil, []string{"US"})
	b.MaxRttMs = usually[uint32](t, "max_rtt", 0, 50)
	b.MinReliabilityPermille = usually[uint32](t, "min_rel", 0, 850)
	b.HostMin.CpuCores = usually[uint32](t, "min_cores", 0, 16)
	b.HostMin.RamBytes = usually[uint64](t, "min_ram", 128<<30, 0, 128e9, 256<<30)
	b.WorkloadClass = usually(t, "class", "training", "inference", "")
	b.Image = usually(t, "image", "docker.io/pytorch/pytorch", "docker.io/library/ubuntu", "ghcr.io/x/y")
	return b
}

func propSources(t *rapid.T) mtSources {
	s := mtSources{rel: map[peer.ID]float64{}, rtt: map[peer.ID]time.Duration{}}
	for _, p := range propPeers {
		s.rel[p] = rapid.SampledFrom([]float64{0.7, 0.9, 1}).Draw(t, "rel")
		if ms := rapid.SampledFrom([]int{-1, 10, 60, 150}).Draw(t, "rtt_ms"); ms >= 0 {
			s.rtt[p] = time.Duration(ms) * time.Millisecond
		}
	}
	return s
}

// propOffers draws up to 40 offers with distinct keys; expired and
// withdrawn ones the book refuses or drops.
func propOffers(t *rapid.T) []*pb.Offer {
	var os []*pb.Offer
	for i := range rapid.IntRange(0, 40).Draw(t, "offers") {
		os = append(os, propOffer(t, propPeers[i%len(propPeers)], "o"+strconv.Itoa(i), 1))
	}
	return os
}

func fill(t *rapid.T, os []*pb.Offer) *Book {
	b := NewBook()
	for _, o := range os {
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatalf("put %s: %v", o.Header.Id, err)
		}
	}
	return b
}

// propMatcher draws sources, an exclusion and a matching time up to 45
// minutes after the book was filled, so some offers have expired since.
func propMatcher(t *rapid.T) (*Matcher, time.Time) {
	src := propSources(t)
	m := NewMatcher(DefaultMatchConfig(), src, src)
	if usually(t, "exclude", false, true) {
		m = m.WithExcluder(mtExcluded{rapid.SampledFrom(propPeers).Draw(t, "excluded"): true})
	}
	return m, mtNow.Add(time.Duration(usually(t, "later_min", 0, 20, 45)) * time.Minute)
}

// TestPropMatchReturnsOnlyFeasible checks every candidate Match returns
// against the full check list, run alone on the offer, and the whole
// result against a linear scan that checks every offer and sorts.
func TestPropMatchReturnsOnlyFeasible(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := fill(t, propOffers(t)).Snapshot()
		bid := propBid(t)
		m, now := propMatcher(t)
		k := rapid.IntRange(0, 5).Draw(t, "k")
		res := m.Match(snap, bid, now, k)
		for _, c := range res.Candidates {
			alone, why := m.Feasible(c.Offer(), bid, now)
			if why != nil {
				t.Fatalf("Match returned %s, which fails %s: %s", c.OfferID(), why.Check, why.Detail)
			}
			if alone.EffectivePriceMicros != c.EffectivePriceMicros || alone.GPUs != c.GPUs || !alone.Start.Equal(c.Start) ||
				alone.PriceMicros != c.PriceMicros || alone.Scores != c.Scores || alone.TotalMicros != c.TotalMicros {
				t.Fatalf("candidate %s differs alone:\n%+v\n%+v", c.OfferID(), alone, c)
			}
		}
		ref := scanMatch(m, snap, bid, now, k)
		if got, want := candidateIDs(res.Candidates), candidateIDs(ref); got != want {
			t.Fatalf("Match %q, linear scan %q", got, want)
		}
		if len(res.Candidates) > res.Feasible || res.Feasible > res.Considered || res.Considered > snap.Len() {
			t.Fatalf("counts: %d candidates, %d feasible, %d considered, %d offers", len(res.Candidates), res.Feasible, res.Considered, snap.Len())
		}
		ex := m.Explain(snap, bid, now)
		if ex.Feasible < len(ref) || (k == 0 && ex.Feasible != res.Feasible) {
			t.Fatalf("Explain counts %d feasible, the scan lists %d, a whole walk counts %d", ex.Feasible, len(ref), res.Feasible)
		}
		if want := scanExplain(m, snap, bid, now); !equalExplanations(ex, want) {
			t.Fatalf("Explain:\n%+v\nthe scan's:\n%+v", ex, want)
		}
	})
}

// TestPropRankingIsDeterministic fills two books with the same offers in
// different orders: Match and Explain must give the same answers, and
// the same again when asked twice.
func TestPropRankingIsDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		os := propOffers(t)
		a, b := fill(t, os), fill(t, rapid.Permutation(os).Draw(t, "order"))
		bid := propBid(t)
		m, now := propMatcher(t)
		k := rapid.IntRange(0, 5).Draw(t, "k")
		first := m.Match(a.Snapshot(), bid, now, k)
		for _, res := range []Result{m.Match(a.Snapshot(), bid, now, k), m.Match(b.Snapshot(), bid, now, k)} {
			if len(res.Candidates) != len(first.Candidates) || res.Considered != first.Considered || res.Feasible != first.Feasible {
				t.Fatalf("results differ: %d/%d/%d vs %d/%d/%d", len(res.Candidates), res.Considered, res.Feasible,
					len(first.Candidates), first.Considered, first.Feasible)
			}
			for i, c := range res.Candidates {
				if f := first.Candidates[i]; !proto.Equal(c.Offer(), f.Offer()) || c.EffectivePriceMicros != f.EffectivePriceMicros || c.Scores != f.Scores {
					t.Fatalf("rank %d: %s vs %s", i, c.OfferID(), f.OfferID())
				}
			}
		}
		if ea, eb := m.Explain(a.Snapshot(), bid, now), m.Explain(b.Snapshot(), bid, now); ea.String() != eb.String() || !slices.Equal(ea.Reasons, eb.Reasons) {
			t.Fatalf("Explain differs:\n%s\n%s", ea, eb)
		}
	})
}

// propMessages draws a multiset of offers and bids for a few keys: each
// (key, seq) has one content, drawn once, and may arrive several times;
// some are withdrawals, some expire before or soon after arrival.
func propMessages(t *rapid.T) (offers []*pb.Offer, bids []*pb.Bid) {
	made := map[string]*pb.Offer{}
	for range rapid.IntRange(0, 40).Draw(t, "n_offers") {
		p := rapid.SampledFrom(propPeers[:3]).Draw(t, "issuer")
		id := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "id")
		seq := uint64(rapid.IntRange(1, 5).Draw(t, "seq"))
		k := string(p) + id + strconv.FormatUint(seq, 10)
		if made[k] == nil {
			made[k] = propOffer(t, p, id, seq)
			if usually(t, "expired", false, true) {
				made[k].Header.ExpiresUnixMs = mtNow.Add(-time.Minute).UnixMilli()
			}
		}
		offers = append(offers, made[k])
	}
	madeBids := map[string]*pb.Bid{}
	for range rapid.IntRange(0, 10).Draw(t, "n_bids") {
		p := rapid.SampledFrom(propPeers[:2]).Draw(t, "bid_issuer")
		seq := uint64(rapid.IntRange(1, 3).Draw(t, "bid_seq"))
		k := string(p) + strconv.FormatUint(seq, 10)
		if madeBids[k] == nil {
			x := propBid(t)
			x.Header.Issuer, x.Header.Seq = []byte(p), seq
			x.Header.ExpiresUnixMs = mtNow.Add(time.Duration(rapid.IntRange(-1, 60).Draw(t, "bid_expires_min")) * time.Minute).UnixMilli()
			madeBids[k] = x
		}
		bids = append(bids, madeBids[k])
	}
	return offers, bids
}

// TestPropBookIgnoresArrivalOrder applies the same messages in two orders
// and compares the books: what they hold, what they remember, what they
// list and what they match, also after expiring both at a later time.
func TestPropBookIgnoresArrivalOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		offers, bids := propMessages(t)
		var books [2]*Book
		for i := range books {
			books[i] = NewBook()
			for _, o := range rapid.Permutation(offers).Draw(t, "offer_order") {
				books[i].PutOffer(o, mtNow) // stale, expired: refused alike
			}
			for _, x := range rapid.Permutation(bids).Draw(t, "bid_order") {
				books[i].PutBid(x, mtNow)
			}
		}
		bid := propBid(t)
		m, now := propMatcher(t)
		sameBooks(t, books, bid, m, now)
		later := mtNow.Add(time.Duration(rapid.IntRange(0, 150).Draw(t, "expire_at_min")) * time.Minute)
		for _, b := range books {
			b.Expire(later)
		}
		sameBooks(t, books, bid, m, now)
	})
}

func sameBooks(t *rapid.T, books [2]*Book, bid *pb.Bid, m *Matcher, now time.Time) {
	a, b := books[0].Snapshot(), books[1].Snapshot()
	if !sameOffers(a.Offers(), b.Offers()) || !slices.Equal(a.Bids(), b.Bids()) {
		t.Fatalf("books differ: %d vs %d offers, %d vs %d bids", a.Len(), b.Len(), a.NumBids(), b.NumBids())
	}
	if sa, sb := stamps(books[0]), stamps(books[1]); !equalMaps(sa, sb) {
		t.Fatalf("books remember different seqs:\n%v\n%v", sa, sb)
	}
	f := OfferFilter{SortBy: "price"}
	if !sameOffers(a.FindOffers(f), b.FindOffers(f)) {
		t.Fatal("listings differ")
	}
	if ra, rb := m.Match(a, bid, now, 3), m.Match(b, bid, now, 3); candidateIDs(ra.Candidates) != candidateIDs(rb.Candidates) {
		t.Fatalf("matches differ: %q vs %q", candidateIDs(ra.Candidates), candidateIDs(rb.Candidates))
	}
}

// stamps lists what a book remembers of every offer and bid key.
func stamps(b *Book) map[string]stamp {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]stamp{}
	for i := range b.offers {
		if sh := b.offers[i]; sh != nil {
			for k, e := range sh.m {
				out["offer "+string(k.issuer)+"/"+k.id] = e.stamp
			}
		}
		if sh := b.bids[i]; sh != nil {
			for k, e := range sh.m {
				out["bid "+string(k.issuer)+"/"+k.id] = e.stamp
			}
		}
	}
	return out
}

func equalMaps[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
