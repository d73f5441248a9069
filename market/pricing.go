package market

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Prices that follow the market: a provider may price its offer at a
// percentile of the comparable live offers in its book (same canonical
// model, same tier, same currency, other issuers), bounded by its floor
// and ceiling. At each re-publish the price moves half way from where it
// stands to that target, and not at all by less than a tick: two
// providers that price after each other then settle on the market
// without chasing each other round it. An agreed lease keeps the price
// it was agreed at: only offers follow.
//
// The market is hostile: keys cost nothing, so anyone can fill a book
// with cheap offers. Only the offers of issuers the caller can trust
// count (ComparablePricesFrom: in a node, those whose attestation it
// verified and that it can locate, or that trust reaches), and a price
// moves by at most MaxStep of itself per re-publish, so even offers that
// pass walk it down slowly, in sight of its owner.

// PriceTick is the least step a policy price moves by, and what it is
// rounded to: a cent.
const PriceTick = 10_000

// PricingPolicy is a provider's rule for its price per GPU-hour.
type PricingPolicy struct {
	// Percentile of the comparable offers' prices the price follows,
	// 0 to 100 (50: the median), interpolated between neighbours.
	Percentile float64
	// Floor and Ceiling bound the price, micros per GPU-hour.
	Floor, Ceiling uint64
	// PeakFactor prices peak windows up: their floor is the price times
	// it (1: no peak pricing), within Ceiling.
	PeakFactor float64
	// MaxStep bounds how far one re-publish moves the price: at most this
	// share of the price it stands at (0.1: 10%), and never less than a
	// tick; 0 leaves the half-way move unbounded.
	MaxStep float64
}

// Validate says what is wrong with the policy, naming the field.
func (p PricingPolicy) Validate() error {
	switch {
	case math.IsNaN(p.Percentile) || p.Percentile < 0 || p.Percentile > 100:
		return invalid("percentile", "%v; want 0 to 100", p.Percentile)
	case p.Floor == 0:
		return invalid("floor", "0; want a price above 0, the least the provider sells at")
	case p.Ceiling < p.Floor:
		return invalid("ceiling", "%s below the floor %s", FormatPrice(p.Ceiling), FormatPrice(p.Floor))
	case math.IsNaN(p.PeakFactor) || p.PeakFactor < 1 || p.PeakFactor > 10:
		return invalid("peak_factor", "%v; want 1 (none) to 10", p.PeakFactor)
	case math.IsNaN(p.MaxStep) || p.MaxStep < 0 || p.MaxStep > 1:
		return invalid("max_step", "%v; want 0 (unbounded) to 1", p.MaxStep)
	}
	return nil
}

// ComparablePrices returns, in rising order, the prices per GPU-hour for
// tier t of the live offers in s at now that are comparable to an offer
// of model: issued by another than self, in currency, selling t, with a
// GPU group of model's canonical model (for a GPU the catalog lacks, in
// any spelling gpus.Key equates). At most one per issuer counts
// (its cheapest), so a provider cannot move the market by publishing
// many offers.
func ComparablePrices(s *Snapshot, model string, t pb.Tier, currency string, self peer.ID, now time.Time) []uint64 {
	return ComparablePricesFrom(s, model, t, currency, self, now, nil)
}

// ComparablePricesFrom is ComparablePrices over the issuers counts
// accepts (nil: all): a key costs nothing, so many issuers are no more
// evidence than one unless each has shown something that cost it.
func ComparablePricesFrom(s *Snapshot, model string, t pb.Tier, currency string, self peer.ID, now time.Time, counts func(peer.ID) bool) []uint64 {
	model = gpus.Default().Canonical(model)
	verdict := map[peer.ID]bool{} // counts, asked once per issuer
	best := map[peer.ID]uint64{}
	var views []*bucketView // of the model, in each spelling of a GPU the catalog lacks
	for _, a := range s.kindsOf([]gpus.Accept{{Model: model, Kind: gpus.Default().KindOf(model)}}) {
		views = append(views, s.byModel[a.Model]...)
	}
	for _, v := range views {
		if t < pb.Tier_TIER_GOLD || t > pb.Tier_TIER_BRONZE {
			break
		}
		for _, it := range v.tiers[t] {
			e := it.e
			if e.key.issuer == self || e.currency != currency || e.expiresMs <= now.UnixMilli() {
				continue
			}
			if counts != nil {
				ok, asked := verdict[e.key.issuer]
				if !asked {
					ok = counts(e.key.issuer)
					verdict[e.key.issuer] = ok
				}
				if !ok {
					continue
				}
			}
			if old, ok := best[e.key.issuer]; !ok || it.price < old {
				best[e.key.issuer] = it.price
			}
		}
	}
	out := make([]uint64, 0, len(best))
	for _, price := range best {
		out = append(out, price)
	}
	slices.Sort(out)
	return out
}

// Percentile is the q-th percentile (0 to 100) of sorted, interpolated
// linearly between the nearest ranks; 0 for none.
func Percentile(sorted []uint64, q float64) uint64 {
	if len(sorted) == 0 {
		return 0
	}
	r := q / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(r))
	hi := min(lo+1, len(sorted)-1)
	v := float64(sorted[lo]) + (r-float64(lo))*(float64(sorted[hi])-float64(sorted[lo]))
	return uint64(math.Round(v))
}

// Target is what the policy aims the price at: the percentile of the
// comparable prices (sorted), or fallback where there are none, within
// the floor and the ceiling, rounded to a tick.
func (p PricingPolicy) Target(comparable []uint64, fallback uint64) uint64 {
	v := fallback
	if len(comparable) > 0 {
		v = Percentile(comparable, p.Percentile)
	}
	return p.bound(roundTick(v))
}

// Next is the price to publish when the offer asks current now (0: it
// has none yet, and goes straight to the target): half way to the
// target, rounded to a tick toward it, but no further from current than
// MaxStep of it (a tick at least); current where the target is less than
// a tick away.
func (p PricingPolicy) Next(current, target uint64) uint64 {
	switch {
	case current == 0:
		return target
	case diff(current, target) < PriceTick:
		return p.bound(current)
	}
	mid := float64(current) + (float64(target)-float64(current))/2
	var next uint64
	if target > current {
		next = uint64(math.Ceil(mid/PriceTick)) * PriceTick
	} else {
		next = uint64(math.Floor(mid/PriceTick)) * PriceTick
	}
	if p.MaxStep > 0 {
		step := max(PriceTick, uint64(p.MaxStep*float64(current)/PriceTick)*PriceTick)
		next = min(max(next, current-min(step, current)), current+step)
	}
	return p.bound(next)
}

// Peak is the floor of a peak window for price: price times PeakFactor,
// rounded up to a tick, within the ceiling (never below price).
func (p PricingPolicy) Peak(price uint64) uint64 {
	v := uint64(math.Ceil(float64(price)*max(p.PeakFactor, 1)/PriceTick)) * PriceTick
	return max(price, min(v, p.Ceiling))
}

func (p PricingPolicy) bound(v uint64) uint64 { return min(max(v, p.Floor), p.Ceiling) }

func roundTick(v uint64) uint64 { return (v + PriceTick/2) / PriceTick * PriceTick }

func diff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// String reads like "p50 of the market within 1.20-4.00, peak ×1.25".
func (p PricingPolicy) String() string {
	s := fmt.Sprintf("p%g of the market within %s-%s", p.Percentile, FormatPrice(p.Floor), FormatPrice(p.Ceiling))
	if p.PeakFactor > 1 {
		s += fmt.Sprintf(", peak ×%g", p.PeakFactor)
	}
	return s
}

// LeasedSpan is a lease's hold on a provider's GPUs: GPUs from StartMs
// to EndMs (Unix ms).
type LeasedSpan struct {
	StartMs, EndMs int64
	GPUs           uint32
}

// WindowFill is what a provider offered and leased in one weekly window
// (nil: a provider without windows, available the whole week) over a
// period, in GPU-hours.
type WindowFill struct {
	Window                    *pb.WeeklyWindow
	OfferedHours, LeasedHours float64
}

// Rate is the window's fill rate: hours leased per hour offered.
func (w WindowFill) Rate() float64 {
	if w.OfferedHours == 0 {
		return 0
	}
	return w.LeasedHours / w.OfferedHours
}

// FillRates counts, per weekly window of an offer of gpus GPUs (the
// whole week where there are none), the GPU-hours offered from from to
// to and the GPU-hours of leases within them.
func FillRates(weekly []*pb.WeeklyWindow, gpus uint32, leases []LeasedSpan, from, to time.Time) []WindowFill {
	windows := weekly
	if len(windows) == 0 {
		windows = []*pb.WeeklyWindow{nil}
	}
	f, t := from.UnixMilli(), to.UnixMilli()
	monday := mondayOf(from).UnixMilli()
	out := make([]WindowFill, len(windows))
	for i, w := range windows {
		out[i].Window = w
		start, end := int64(0), int64(weekMs)
		if w != nil {
			start, end = int64(w.GetStartMinute())*60_000, int64(w.GetEndMinute())*60_000
		}
		for week := monday; week < t; week += weekMs {
			lo, hi := max(week+start, f), min(week+end, t)
			if lo >= hi {
				continue
			}
			out[i].OfferedHours += float64(hi-lo) * float64(gpus) / 3.6e6
			for _, l := range leases {
				if a, b := max(lo, l.StartMs), min(hi, l.EndMs); a < b {
					out[i].LeasedHours += float64(b-a) * float64(l.GPUs) / 3.6e6
				}
			}
		}
	}
	return out
}

// mondayOf is 00:00 UTC of the Monday of t's week.
func mondayOf(t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
}

// DayAmount is what a provider earned on one UTC day, in micros.
type DayAmount struct {
	Day    time.Time // 00:00 UTC
	Micros uint64
}

// DailyEarnings sums, per UTC day from from's to to's, the amounts of the
// receipts in currency, each on the day its lease ended; days without
// one count 0.
func DailyEarnings(receipts []*pb.Receipt, currency string, from, to time.Time) []DayAmount {
	first := time.Date(from.UTC().Year(), from.UTC().Month(), from.UTC().Day(), 0, 0, 0, 0, time.UTC)
	var out []DayAmount
	for d := first; !d.After(to); d = d.AddDate(0, 0, 1) {
		out = append(out, DayAmount{Day: d})
	}
	for _, r := range receipts {
		end := time.UnixMilli(r.GetEndUnixMs())
		if r.GetCurrency() != currency || end.Before(first) || end.After(to) {
			continue
		}
		if i := int(end.Sub(first) / (24 * time.Hour)); i < len(out) {
			out[i].Micros += r.GetAmountMicros()
		}
	}
	return out
}
