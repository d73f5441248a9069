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
			ids = append(ids, c.Offer.Header.Id)
		}
		slices.Sort(ids)
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("%q ≥ %d GB matched %q, want %q", tc.models, tc.minGB, got, tc.want)
		}
		if ex := m.Explain(snap, bid, mtNow); ex.Feasible != len(ids) {
			t.Errorf("%q: Explain counts %d feasible, Match %d: %s", tc.models, ex.Feasible, len(ids), ex)
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
