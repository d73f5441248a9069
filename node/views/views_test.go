package views

import (
	"testing"

	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
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

// The basis says what a score rests on, and names the bridge when all
// the trust that reaches the peer crossed one other peer.
func TestBasisSaysWhatAScoreRestsOn(t *testing.T) {
	bridge := peer.ID("the-bridge")
	for _, c := range []struct {
		sc   reputation.Score
		want string
	}{
		{reputation.Score{Reliability: 0.6}, "0.60: no history"},
		{reputation.Score{Reliability: 0.73, Receipts: 2, Trusted: 2}, "0.73: 2 receipts, 2 via trusted peers"},
		{reputation.Score{Reliability: 0.4, Receipts: 1, Failures: 2, Disputes: 1}, "0.40: 1 receipts, 0 via trusted peers, 2 failures, 1 dispute"},
		{reputation.Score{Reliability: 0.6, Receipts: 3, Bridge: bridge}, "0.60: 3 receipts, 0 via trusted peers, all its trust through " + bridge.String() + ", so none counts"},
	} {
		if got := Basis(c.sc); got != c.want {
			t.Errorf("Basis(%+v) = %q, want %q", c.sc, got, c.want)
		}
	}
}
