package views

import (
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
)

// The node sorts what only it knows: the whole offer's price an hour,
// RTT (unknown last) and reliability; ties keep the price order.
func TestSortOfferViews(t *testing.T) {
	v := func(id, price string, gpus uint32, rtt float64, src string, rel float64) api.OfferView {
		return api.OfferView{ID: id, Price: price, GPUs: []api.GPUView{{Count: gpus}}, RTTMillis: rtt, RTTSource: src, Reliability: rel}
	}
	vs := []api.OfferView{v("a", "1.0", 8, 0, "unknown", 0.9), v("b", "2.0", 1, 50, "measured", 0.5), v("c", "3.0", 2, 10, "estimated", 0.9)}
	ids := func() string {
		s := ""
		for _, x := range vs {
			s += x.ID
		}
		return s
	}
	for _, tc := range []struct{ by, want string }{{"total", "bca"}, {"rtt", "cba"}, {"reliability", "cab"}, {"price", "cab"}} {
		SortOffers(vs, tc.by)
		if got := ids(); got != tc.want {
			t.Errorf("sort %s: %s, want %s", tc.by, got, tc.want)
		}
	}
}
