package market

import (
	"slices"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The walk of issue 26: fake offers that all count put a follower's
// target at its floor, 1.50, and it stood at 2.49. Half way a publish it
// was at 1.56 after four; with MaxStep 0.1 each publish moves it by at
// most a tenth of where it stands, and the same walk ends above 1.60
// after four, 2.02 after two.
func TestAPriceMovesAtMostMaxStepPerRepublish(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 1_500_000, Ceiling: 9_000_000, PeakFactor: 1, MaxStep: 0.1}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	price := uint64(2_490_000)
	walk := []uint64{price}
	for range 4 {
		next := p.Next(price, p.Target([]uint64{1_000_000, 1_100_000, 1_200_000}, 0))
		if d := diff(next, price); d > uint64(0.1*float64(price))+PriceTick/2 || d < PriceTick {
			t.Errorf("one publish moved %s to %s: more than 10%% or less than a tick", FormatPrice(price), FormatPrice(next))
		}
		price = next
		walk = append(walk, price)
	}
	if price < 1_600_000 || walk[2] < 2_000_000 {
		t.Errorf("walk %v: too fast for steps of 10%%", walk)
	}
	// Up as well as down, and a tick where a tenth is less.
	if got := p.Next(2_000_000, 4_000_000); got != 2_200_000 {
		t.Errorf("2.00 toward 4.00: %s, want 2.20", FormatPrice(got))
	}
	q := p
	q.Floor = PriceTick
	if got := q.Next(50_000, 10_000); got != 40_000 {
		t.Errorf("0.05 toward 0.01: %s, want 0.04 (one tick)", FormatPrice(got))
	}
	bad := p
	bad.MaxStep = 1.5
	if err := bad.Validate(); err == nil {
		t.Error("a max_step of 1.5 passed")
	}
}

// Bounded steps still settle beside a fixed price, without oscillating.
func TestBoundedStepsStillSettle(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 500_000, Ceiling: 9_000_000, PeakFactor: 1, MaxStep: 0.1}
	const fixed = 2_000_000
	price := [2]uint64{6_000_000, 1_500_000}
	var hist [2][]uint64
	for range 60 {
		next := price
		for i := range 2 {
			others := []uint64{price[1-i], fixed}
			slices.Sort(others)
			next[i] = p.Next(price[i], p.Target(others, 0))
		}
		price = next
		hist[0], hist[1] = append(hist[0], price[0]), append(hist[1], price[1])
	}
	for i, h := range hist {
		last := h[len(h)-1]
		if diff(last, fixed) > 2*PriceTick || !slices.Equal(h[len(h)-10:], slices.Repeat([]uint64{last}, 10)) {
			t.Errorf("provider %d: %v", i, h)
		}
	}
}

// ComparablePricesFrom counts only the issuers it is told to trust.
func TestComparablePricesCountOnlyTrustedIssuers(t *testing.T) {
	b := NewBook()
	for i, price := range []uint64{2_000_000, 1_000_000, 1_100_000, 2_200_000} {
		o := mtOffer(mtPeers[i+1], "x")
		o.Gpus[0].Model, o.PriceMicros, o.TierPrices = "H100 SXM", price, nil
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	trusted := map[peer.ID]bool{mtPeers[1]: true, mtPeers[4]: true}
	asked := map[peer.ID]int{}
	got := ComparablePricesFrom(b.Snapshot(), "H100 SXM", pb.Tier_TIER_SILVER, "USD", mtPeers[0], mtNow, func(p peer.ID) bool { asked[p]++; return trusted[p] })
	if want := []uint64{2_000_000, 2_200_000}; !slices.Equal(got, want) {
		t.Errorf("got %v, want the trusted issuers' %v", got, want)
	}
	for p, n := range asked {
		if n > 1 {
			t.Errorf("asked about %s %d times", p, n)
		}
	}
}
