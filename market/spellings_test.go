package market

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

// gpu sets an offer's one GPU group: its name as listed, count and
// memory in MiB.
func gpu(name string, count uint32, mib uint64) func(*pb.Offer) {
	return func(o *pb.Offer) {
		o.Gpus = []*pb.GPUGroup{{Model: name, Count: count, VramBytes: mib << 20, ComputeCapability: 89}}
	}
}

var spellingPeers = benchPeers(10, 4711)

// A book of marketplace spellings: bids in any common spelling find the
// offers they name, a memory size in a name holds memory to it, and
// nothing else matches.
func TestSpellingsFindTheirOffers(t *testing.T) {
	b := NewBook()
	for i, mod := range []func(*pb.Offer){
		gpu("NVIDIA GeForce RTX 4090", 1, 24564), // o0
		gpu("RTX 4090", 1, 49140),                // o1: a 48 GB board
		gpu("RTX 5060 Ti", 1, 8151),              // o2
		gpu("RTX 5060 Ti", 1, 16311),             // o3
		gpu("Q RTX 8000", 1, 46068),              // o4: 44.99 GiB with ECC
		gpu("Quadro RTX 8000", 1, 49152),         // o5
		gpu("Tesla V100", 1, 32768),              // o6
		gpu("Foo 9", 1, 46080),                   // o7: a GPU the catalog lacks, 45 GiB
		gpu("foo-9", 1, 24576),                   // o8: the same, spelt otherwise
		gpu("A100 PCIE", 1, 81920),               // o9
	} {
		o := mtOffer(spellingPeers[i], "o"+strconv.Itoa(i)) // one provider each
		mod(o)
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	snap := b.Snapshot()
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	for _, tc := range []struct {
		models []string
		minGB  uint64
		want   string
	}{
		{[]string{"RTX 4090"}, 0, "o0 o1"},
		{[]string{"RTX 4090 48GB"}, 0, "o1"},
		{[]string{"RTX 4090 24GB"}, 0, "o0"},
		{[]string{"RTX 5060 Ti 16GB"}, 0, "o3"},
		{[]string{"RTX 5060 Ti 8GB"}, 0, "o2"},
		{[]string{"Quadro RTX 8000"}, 0, "o4 o5"},
		{[]string{"V100"}, 0, "o6"},
		{[]string{"Foo 9"}, 0, "o7 o8"},
		{[]string{"A100 PCIe 80GB"}, 0, "o9"},
		{[]string{"A100 80GB"}, 0, "o9"},
		{[]string{"A100 40GB"}, 0, ""},
		{nil, 48, "o1 o4 o5 o7 o9"}, // 44.99 and 45 GiB sell as 48 GB, named or not
	} {
		bid := mtBid()
		bid.Gpu = &pb.GPURequirement{Models: tc.models, Count: 1, MinVramBytes: tc.minGB << 30}
		res := m.Match(snap, bid, mtNow, 0)
		var ids []string
		for _, c := range res.Candidates {
			ids = append(ids, c.OfferID())
		}
		slices.Sort(ids)
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("%q ≥ %d GB matched %q, want %q", tc.models, tc.minGB, got, tc.want)
		}
		if ex := m.Explain(snap, bid, mtNow); ex.Feasible != len(ids) || !equalExplanations(ex, scanExplain(m, snap, bid, mtNow)) {
			t.Errorf("%q: Explain counts %d feasible, Match %d, the scan %d: %s", tc.models, ex.Feasible, len(ids), scanExplain(m, snap, bid, mtNow).Feasible, ex)
		}
		// Each offer alone, as a provider's admission reads it, agrees.
		for _, o := range snap.Offers() {
			if _, why := m.Feasible(o, bid, mtNow); (why == nil) != slices.Contains(ids, o.Header.Id) {
				t.Errorf("%q: Feasible(%s) = %v, Match says %v", tc.models, o.Header.Id, why, slices.Contains(ids, o.Header.Id))
			}
		}
	}
	// A provider's market-following price sees offers of its own kind in
	// any spelling: a Quadro provider the "Q RTX" offers, a GPU the catalog
	// lacks its other spellings.
	for model, want := range map[string]int{"Quadro RTX 8000": 2, "FOO 9": 2, "RTX 4090": 2} {
		if got := ComparablePrices(snap, model, pb.Tier_TIER_SILVER, "USD", "", mtNow); len(got) != want {
			t.Errorf("ComparablePrices(%q) = %v, want %d prices", model, got, want)
		}
	}
	if name, ok := snap.GPUNamed("FOO-9"); !ok || (name != "Foo 9" && name != "foo-9") {
		t.Errorf("GPUNamed(FOO-9) = %q, %v", name, ok)
	}
	if _, ok := snap.GPUNamed("Bar 1"); ok {
		t.Error("GPUNamed names a GPU no offer has")
	}
}

// When nothing fits, Explain leads with the one constraint whose moving
// lets offers fit, with the figure a renter acts on; the nearest models
// are the nearest by chip, memory and family, whatever their numbers of
// offers, each from its price for the GPUs asked.
func TestExplainLeadsWithTheBlocker(t *testing.T) {
	b := NewBook()
	n := 0
	put := func(model string, gpus uint32, vramGiB uint64, price uint64) *pb.Offer {
		o := mtOffer(benchPeers(64, 99)[n], "x"+strconv.Itoa(n))
		n++
		o.Gpus = []*pb.GPUGroup{{Model: model, Count: gpus, VramBytes: vramGiB << 30, ComputeCapability: 89}}
		o.PriceMicros, o.TierPrices = price, nil
		o.GpusWhole = gpus == 8
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
		return o
	}
	put("RTX 4090", 1, 24, 133_300)
	put("RTX 4090", 1, 24, 150_000)
	put("RTX 4090", 8, 24, 120_000) // sold whole: not one GPU of it
	for range 10 {
		put("RTX 5060 Ti", 1, 16, 60_000)
	}
	put("RTX 6000 Ada", 1, 48, 700_000)
	put("L40", 1, 48, 900_000)
	put("RTX PRO 6000 Blackwell", 1, 96, 1_500_000)
	put("H100 SXM", 1, 80, 1_000_000)
	put("H100 SXM", 8, 80, 2_000_000)
	snap := b.Snapshot()
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	ask := func(models []string, count uint32, maxPrice uint64, minVRAMGiB uint64) Explanation {
		bid := mtBid()
		bid.Gpu = &pb.GPURequirement{Models: models, Count: count, MinVramBytes: minVRAMGiB << 30}
		bid.MaxPriceMicros, bid.HostMin = maxPrice, nil
		return m.Explain(snap, bid, mtNow)
	}
	// One RTX 4090 under 0.12: the price blocks; single ones start at 0.1333.
	ex := ask([]string{"RTX 4090"}, 1, 120_000, 0)
	if ex.Blocker == nil || ex.Blocker.Check != "price" || ex.Blocker.Figure != "the cheapest asks 0.1333/GPU-h" || ex.Blocker.Fit != 2 ||
		!strings.HasPrefix(ex.String(), "silver price above 0.12 blocks every offer: without it 2 fit, the cheapest asks 0.1333/GPU-h") {
		t.Errorf("one 4090 under 0.12: %s (%+v)", ex, ex.Blocker)
	}
	// 128 GB of memory: the most any card has is 96 GB.
	ex = ask(nil, 1, 10_000_000, 128)
	if ex.Blocker == nil || ex.Blocker.Check != "vram" || ex.Blocker.Figure != "the most memory a GPU of them has is 96 GB" {
		t.Errorf("128 GB: %s", ex)
	}
	// An L40S: the Ada cards of 48 GB are nearest, not the most offered.
	ex = ask([]string{"L40S"}, 1, 10_000_000, 0)
	if len(ex.Nearest) != 3 || ex.Nearest[0].Model != "L40" || ex.Nearest[1].Model != "RTX 6000 Ada" || ex.Nearest[2].Model != "RTX 4090" {
		t.Errorf("L40S: nearest %+v", ex.Nearest)
	}
	// Eight H200: the H100 is nearest, from the price of eight of them.
	ex = ask([]string{"H200"}, 8, 10_000_000, 0)
	if len(ex.Nearest) == 0 || ex.Nearest[0].Model != "H100 SXM" || ex.Nearest[0].PriceMicros != 2_000_000 || ex.Nearest[0].GPUs != 8 {
		t.Errorf("8 H200: nearest %+v", ex.Nearest)
	}
	// A size the book lacks: the model of another size is the nearest.
	ex = ask([]string{"RTX 4090 48GB"}, 1, 10_000_000, 0)
	if len(ex.Nearest) == 0 || ex.Nearest[0].Model != "RTX 4090" {
		t.Errorf("a 48 GB 4090: nearest %+v", ex.Nearest)
	}
	// Two constraints that block together: no one blocker, the counts stay.
	ex = ask([]string{"L40S"}, 1, 1, 0)
	if ex.Blocker != nil || !strings.Contains(ex.String(), "by the first check each fails: 18 offers: model not L40S") {
		t.Errorf("L40S at 0.000001: %s (%+v)", ex, ex.Blocker)
	}
}
