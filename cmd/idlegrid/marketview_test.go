package main

import (
	"slices"
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
)

// offers --group-by model counts offers and GPUs per catalog model and
// currency, with the least and median price and the regions by count.
func TestSummariseByModel(t *testing.T) {
	o := func(price, country string, gs ...api.GPUView) api.OfferView {
		return api.OfferView{Price: price, Currency: "USD", Country: country, GPUs: gs}
	}
	h100 := func(n uint32) api.GPUView { return api.GPUView{Model: "H100 SXM", Count: n} }
	r4090 := func(n uint32) api.GPUView { return api.GPUView{Model: "RTX 4090", Count: n} }
	got := summariseByModel([]api.OfferView{
		o("2.1", "DE", h100(8)), o("1.9", "US", h100(4)), o("2.5", "DE", h100(8)), o("2.3", "FR", h100(2)),
		o("0.4", "PL", r4090(1)), o("0.35", "PL", r4090(2), r4090(2)),
	})
	want := []modelSummary{
		{Model: "RTX 4090", Offers: 2, GPUs: 5, Currency: "USD", MinPrice: "0.35", Median: "0.375", Regions: []string{"PL"}},
		{Model: "H100 SXM", Offers: 4, GPUs: 22, Currency: "USD", MinPrice: "1.9", Median: "2.2", Regions: []string{"DE", "FR", "US"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if g, w := got[i], want[i]; g.Model != w.Model || g.Offers != w.Offers || g.GPUs != w.GPUs || g.MinPrice != w.MinPrice || g.Median != w.Median || !slices.Equal(g.Regions, w.Regions) {
			t.Errorf("%d: got %+v, want %+v", i, g, w)
		}
	}
}

// quote --sort reorders the ranked list, ranks kept; an unknown RTT
// sorts last.
func TestSortCandidates(t *testing.T) {
	c := func(rank int, total string, rtt float64, src string, rel float64) api.CandidateView {
		return api.CandidateView{Rank: rank, Total: total, Offer: api.OfferView{RTTMillis: rtt, RTTSource: src, Reliability: rel}}
	}
	cs := []api.CandidateView{c(1, "30", 0, "unknown", 0.5), c(2, "10", 80, "measured", 0.9), c(3, "20", 20, "estimated", 0.99)}
	ranks := func() []int {
		var r []int
		for _, x := range cs {
			r = append(r, x.Rank)
		}
		return r
	}
	for _, tc := range []struct {
		by   string
		want []int
	}{{"rtt", []int{3, 2, 1}}, {"total", []int{2, 3, 1}}, {"reliability", []int{3, 2, 1}}, {"effective", []int{3, 2, 1}}} {
		sortCandidates(cs, tc.by) // effective: the order as it stands
		if got := ranks(); !slices.Equal(got, tc.want) {
			t.Errorf("--sort %s: ranks %v, want %v", tc.by, got, tc.want)
		}
	}
}
