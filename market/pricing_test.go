package market

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
)

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		xs   []uint64
		q    float64
		want uint64
	}{
		{nil, 50, 0},
		{[]uint64{7}, 0, 7},
		{[]uint64{7}, 100, 7},
		{[]uint64{1, 3}, 50, 2},
		{[]uint64{1, 2, 3, 4}, 50, 3}, // 2.5 rounds half away from zero
		{[]uint64{10, 20, 30, 40, 50}, 25, 20},
		{[]uint64{10, 20, 30, 40, 50}, 10, 14},
		{[]uint64{10, 20, 30, 40, 50}, 100, 50},
		{[]uint64{10, 20, 30, 40, 50}, 0, 10},
	} {
		if got := Percentile(c.xs, c.q); got != c.want {
			t.Errorf("Percentile(%v, %g) = %d, want %d", c.xs, c.q, got, c.want)
		}
	}
}

func TestPricingPolicyTarget(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 1_000_000, Ceiling: 4_000_000, PeakFactor: 1.25}
	for _, c := range []struct {
		name       string
		comparable []uint64
		fallback   uint64
		want       uint64
	}{
		{"no market: the fallback", nil, 2_500_000, 2_500_000},
		{"no market: the fallback within the floor", nil, 500_000, 1_000_000},
		{"the median", []uint64{1_500_000, 2_000_000, 3_000_000}, 9_000_000, 2_000_000},
		{"interpolated, to a cent", []uint64{1_500_000, 2_005_000}, 0, 1_750_000},
		{"rounded half up to a cent", []uint64{1_500_000, 1_510_000}, 0, 1_510_000},
		{"held to the floor", []uint64{100_000, 200_000}, 0, 1_000_000},
		{"held to the ceiling", []uint64{9_000_000}, 0, 4_000_000},
	} {
		if got := p.Target(c.comparable, c.fallback); got != c.want {
			t.Errorf("%s: Target = %s, want %s", c.name, FormatPrice(got), FormatPrice(c.want))
		}
	}
}

func TestPricingPolicyNext(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 1_000_000, Ceiling: 4_000_000, PeakFactor: 1}
	for _, c := range []struct {
		name            string
		current, target uint64
		want            uint64
	}{
		{"first price: the target", 0, 2_000_000, 2_000_000},
		{"half way down", 3_000_000, 2_000_000, 2_500_000},
		{"half way up", 1_500_000, 2_000_000, 1_750_000},
		{"half way, rounded toward the target", 2_000_000, 2_030_000, 2_020_000},
		{"half way down, rounded toward the target", 2_030_000, 2_000_000, 2_010_000},
		{"a tick away: the target", 2_000_000, 2_010_000, 2_010_000},
		{"under a tick away: stays", 2_000_000, 2_009_999, 2_000_000},
		{"at the target: stays", 2_000_000, 2_000_000, 2_000_000},
		{"a price under the floor comes up to it", 500_000, 500_000, 1_000_000},
	} {
		if got := p.Next(c.current, c.target); got != c.want {
			t.Errorf("%s: Next(%s, %s) = %s, want %s", c.name, FormatPrice(c.current), FormatPrice(c.target), FormatPrice(got), FormatPrice(c.want))
		}
	}
}

func TestPricingPolicyPeak(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 1_000_000, Ceiling: 4_000_000, PeakFactor: 1.25}
	for _, c := range []struct{ price, want uint64 }{
		{2_000_000, 2_500_000},
		{2_010_000, 2_520_000}, // 2.5125 up to a cent
		{3_600_000, 4_000_000}, // the ceiling
		{4_000_000, 4_000_000},
	} {
		if got := p.Peak(c.price); got != c.want {
			t.Errorf("Peak(%s) = %s, want %s", FormatPrice(c.price), FormatPrice(got), FormatPrice(c.want))
		}
	}
	if got := (PricingPolicy{Floor: 1, Ceiling: 9_000_000, PeakFactor: 1}).Peak(2_000_000); got != 2_000_000 {
		t.Errorf("no peak factor: Peak = %s", FormatPrice(got))
	}
}

func TestPricingPolicyValidate(t *testing.T) {
	ok := PricingPolicy{Percentile: 50, Floor: 1_000_000, Ceiling: 4_000_000, PeakFactor: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field string
		edit  func(*PricingPolicy)
	}{
		{"percentile", func(p *PricingPolicy) { p.Percentile = 101 }},
		{"percentile", func(p *PricingPolicy) { p.Percentile = math.NaN() }},
		{"floor", func(p *PricingPolicy) { p.Floor = 0 }},
		{"ceiling", func(p *PricingPolicy) { p.Ceiling = 999_999 }},
		{"peak_factor", func(p *PricingPolicy) { p.PeakFactor = 0.5 }},
	} {
		p := ok
		c.edit(&p)
		var fe *FieldError
		if err := p.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", p, err, c.field)
		}
	}
}

// TestComparablePrices: the same canonical model in any spelling, the
// tier's price, one per issuer (its cheapest), never the provider's own,
// nor expired offers or other currencies.
func TestComparablePrices(t *testing.T) {
	b := NewBook()
	put := func(issuer int, id, model string, price uint64, edit func(*pb.Offer)) {
		o := mtOffer(mtPeers[issuer], id)
		o.Gpus[0].Model, o.PriceMicros, o.TierPrices = model, price, nil
		if edit != nil {
			edit(o)
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	put(0, "own", "H100 SXM", 1_000_000, nil)
	put(1, "a", "NVIDIA H100 80GB HBM3", 2_000_000, nil)
	put(1, "b", "h100-sxm", 1_800_000, nil) // the same issuer's cheaper one
	put(2, "c", "H100 SXM", 2_500_000, func(o *pb.Offer) {
		o.TierPrices = []*pb.TierPrice{{Tier: pb.Tier_TIER_GOLD, MicrosPerGpuHour: 3_000_000}}
	})
	put(3, "d", "H100 PCIe", 1_500_000, nil)                                        // another model
	put(4, "e", "H100 SXM", 1_600_000, func(o *pb.Offer) { o.Currency = "EUR" })    // another currency
	put(5, "f", "H100 SXM", 1_700_000, func(o *pb.Offer) { o.Tiers = o.Tiers[:1] }) // gold only
	put(6, "g", "H100 SXM", 1_100_000, func(o *pb.Offer) { o.Header.ExpiresUnixMs = mtNow.Add(time.Minute).UnixMilli() })
	s := b.Snapshot()
	later := mtNow.Add(2 * time.Minute) // g has expired
	if got, want := ComparablePrices(s, "H100 SXM", pb.Tier_TIER_SILVER, "USD", mtPeers[0], later), []uint64{1_800_000, 2_500_000}; !slices.Equal(got, want) {
		t.Errorf("silver: %v, want %v", got, want)
	}
	if got, want := ComparablePrices(s, "h100 sxm", pb.Tier_TIER_GOLD, "USD", mtPeers[0], later), []uint64{1_700_000, 1_800_000, 3_000_000}; !slices.Equal(got, want) {
		t.Errorf("gold: %v, want %v", got, want)
	}
}

// TestPolicyPricesSettleWithoutOscillating plays rounds of two providers
// pricing at the median of the others' prices beside one at a fixed
// price, re-publishing at once or in turn: both settle within two ticks
// of the fixed price, each crosses it at most once on the way (an
// oscillation crosses it again and again), and then stay put.
func TestPolicyPricesSettleWithoutOscillating(t *testing.T) {
	p := PricingPolicy{Percentile: 50, Floor: 500_000, Ceiling: 9_000_000, PeakFactor: 1}
	const fixed = 2_000_000
	for _, c := range []struct {
		name   string
		start  [2]uint64
		inTurn bool
	}{
		{"at once, from either side", [2]uint64{3_000_000, 1_500_000}, false},
		{"in turn, from either side", [2]uint64{3_000_000, 1_500_000}, true},
		{"at once, both above", [2]uint64{6_000_000, 4_000_000}, false},
		{"in turn, both below", [2]uint64{600_000, 900_000}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			price := c.start
			hist := [2][]uint64{{price[0]}, {price[1]}}
			for range 30 {
				next := price
				for i := range 2 {
					others := []uint64{price[1-i], fixed}
					slices.Sort(others)
					next[i] = p.Next(price[i], p.Target(others, 0))
					if c.inTurn {
						price[i] = next[i]
					}
				}
				price = next
				hist[0], hist[1] = append(hist[0], price[0]), append(hist[1], price[1])
			}
			for i, h := range hist {
				last := h[len(h)-1]
				if diff(last, fixed) > 2*PriceTick {
					t.Errorf("provider %d settled at %s, the fixed one asks %s: %v", i, FormatPrice(last), FormatPrice(fixed), h)
				}
				if !slices.Equal(h[len(h)-10:], slices.Repeat([]uint64{last}, 10)) {
					t.Errorf("provider %d still moves: %v", i, h)
				}
				crossings := 0
				for j := 1; j < len(h); j++ {
					if (h[j-1] < fixed) != (h[j] < fixed) && h[j] != fixed && h[j-1] != fixed {
						crossings++
					}
				}
				if crossings > 1 {
					t.Errorf("provider %d crossed the market %d times: %v", i, crossings, h)
				}
			}
		})
	}
}

func TestFillRates(t *testing.T) {
	mon := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC) // a Monday
	at := func(day, hour int) int64 { return mon.Add(time.Duration(day*24+hour) * time.Hour).UnixMilli() }
	nights := []*pb.WeeklyWindow{
		{StartMinute: 18 * 60, EndMinute: 24 * 60},              // Mon 18:00-24:00
		{StartMinute: 5*1440 + 8*60, EndMinute: 5*1440 + 20*60}, // Sat 08:00-20:00
	}
	hours := func(ws []WindowFill) (offered, leased []float64) {
		for _, w := range ws {
			offered, leased = append(offered, w.OfferedHours), append(leased, w.LeasedHours)
		}
		return
	}
	for _, c := range []struct {
		name            string
		weekly          []*pb.WeeklyWindow
		gpus            uint32
		leases          []LeasedSpan
		from, to        time.Time
		offered, leased []float64
	}{
		{"always, one week, idle", nil, 8, nil, mon, mon.Add(7 * 24 * time.Hour), []float64{8 * 168}, []float64{0}},
		{"always, a lease of 2 GPUs for 3 hours", nil, 8, []LeasedSpan{{at(1, 10), at(1, 13), 2}}, mon, mon.Add(48 * time.Hour), []float64{8 * 48}, []float64{6}},
		{"a lease counts within the period only", nil, 1, []LeasedSpan{{at(0, 22), at(1, 2), 1}}, mon.Add(24 * time.Hour), mon.Add(48 * time.Hour), []float64{24}, []float64{2}},
		{"windows over two weeks, from mid-week", nights, 4, []LeasedSpan{
			{at(0, 19), at(0, 21), 4},   // Mon 19-21: before the period
			{at(5, 10), at(5, 12), 2},   // Sat 10-12: 4 GPU-hours in the Saturday window
			{at(7, 17), at(7, 20), 4},   // next Mon 17-20: 2 hours of it in the window, 8 GPU-hours
			{at(12, 19), at(12, 22), 1}, // next Sat 19-22: 1 hour in the window
		}, mon.Add(24 * time.Hour), mon.Add(14 * 24 * time.Hour), []float64{4 * 6, 2 * 4 * 12}, []float64{8, 4 + 1}},
		{"a period that ends inside a window", nights, 2, nil, mon, mon.Add(20 * time.Hour), []float64{2 * 2, 0}, []float64{0, 0}},
	} {
		offered, leased := hours(FillRates(c.weekly, c.gpus, c.leases, c.from, c.to))
		if !slices.Equal(offered, c.offered) || !slices.Equal(leased, c.leased) {
			t.Errorf("%s: offered %v leased %v GPU-hours, want %v and %v", c.name, offered, leased, c.offered, c.leased)
		}
	}
	if r := (WindowFill{OfferedHours: 8, LeasedHours: 2}).Rate(); r != 0.25 {
		t.Errorf("rate %v, want 0.25", r)
	}
	if r := (WindowFill{}).Rate(); r != 0 {
		t.Errorf("rate of nothing offered %v, want 0", r)
	}
}

func TestDailyEarnings(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rc := func(end time.Time, cur string, amount uint64) *pb.Receipt {
		return &pb.Receipt{EndUnixMs: end.UnixMilli(), Currency: cur, AmountMicros: amount}
	}
	got := DailyEarnings([]*pb.Receipt{
		rc(day.Add(-time.Hour), "USD", 9_000_000),   // before the period
		rc(day.Add(3*time.Hour), "USD", 1_500_000),  // Dec 1
		rc(day.Add(23*time.Hour), "USD", 500_000),   // Dec 1
		rc(day.Add(26*time.Hour), "EUR", 7_000_000), // another currency
		rc(day.Add(50*time.Hour), "USD", 2_250_000), // Dec 3
		rc(day.Add(80*time.Hour), "USD", 4_000_000), // after the period
	}, "USD", day.Add(2*time.Hour), day.Add(60*time.Hour))
	want := []DayAmount{{day, 2_000_000}, {day.AddDate(0, 0, 1), 0}, {day.AddDate(0, 0, 2), 2_250_000}}
	if !slices.Equal(got, want) {
		t.Errorf("DailyEarnings = %v, want %v", got, want)
	}
}
