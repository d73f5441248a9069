package views

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/libp2p/go-libp2p/core/crypto"
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

// A renter's GPU names become the names bids carry: the catalog's, with
// the memory a name holds to; a GPU the catalog lacks is requestable by
// the name offers in the book give it, in any spelling, and refused with
// the nearest names where no offer has it.
func TestResolveGPUsNamesWhatBidsCarry(t *testing.T) {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	issuer, _ := peer.IDFromPublicKey(pub)
	now := time.Now()
	book := market.NewBook()
	o := &pb.Offer{
		Header: &pb.Header{Version: market.Version, Issuer: []byte(issuer), Id: "o", Seq: 1, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpus:   []*pb.GPUGroup{{Model: "Foo 9", Count: 1, VramBytes: 24 << 30, ComputeCapability: 89}},
		Host:   &pb.HostSpec{CpuCores: 8, RamBytes: 64 << 30}, Region: &pb.Region{Country: "DE"}, Currency: "USD", PriceMicros: 1_000_000,
		MinDurationSeconds: 60, MaxDurationSeconds: 3600, Tiers: []pb.Tier{pb.Tier_TIER_SILVER},
	}
	if err := book.PutOffer(o, now); err != nil {
		t.Fatal(err)
	}
	snap := book.Snapshot()
	got, err := ResolveGPUs("gpus", []string{"4090", "RTX 4090 48GB", "Q RTX 8000", "h100", "A100 PCIE", "foo-9"}, snap)
	if want := []string{"RTX 4090", "RTX 4090 48GB", "Quadro RTX 8000", "H100", "A100 PCIE", "Foo 9"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ResolveGPUs = %q, %v; want %q", got, err, want)
	}
	if _, err := ResolveGPUs("gpus", []string{"foo-9"}, nil); err == nil || !strings.Contains(err.Error(), `gpus[0]: GPU model "foo-9": not in the catalog`) {
		t.Errorf("without a book: %v", err)
	}
	if _, err := ResolveGPUs("gpu", []string{"RTX 4099"}, snap); err == nil || !strings.Contains(err.Error(), `did you mean "RTX 4090"`) {
		t.Errorf("a typo: %v", err)
	}
}
