package market

import (
	"fmt"
	"slices"
	"time"
)

// HoldLimit bounds what one class of renters (those with no history at
// a provider) holds of its calendar together, ahead of a near horizon:
// keys cost nothing, so a cap per renter alone lets a handful of fresh
// keys book every GPU for days. A lease that starts within Prompt of now,
// or has started, is use, not a hold: its renter must attend it, as any
// renter must. A lease booked to start later holds what lies past Near.
type HoldLimit struct {
	// Prompt is how soon a lease must start to be use throughout.
	Prompt time.Duration
	// Near is how far ahead of now a booked lease's time is not yet a
	// hold: one that starts soon blocks only what overlaps it.
	Near time.Duration
	// GPUs is the most slots the class holds at any instant past Near.
	GPUs int
	// GPUTime is the most GPU time (GPUs × duration) the class holds past
	// Near, all its allocations together.
	GPUTime time.Duration
}

// CheckHolds refuses r, a lease booked ahead (one that starts later than
// lim.Prompt from now), when with r the allocations booked ahead that in
// says belong to r's class would hold more past lim.Near than lim allows:
// more slots at one instant, or more GPU time in all. The refusal is an
// *AdmissionError of code AdmissionHoldLimit.
func (c *Calendar) CheckHolds(r LeaseRequest, lim HoldLimit, in func(id string) bool, now time.Time) error {
	r, now = r.normal(), now.Round(0)
	from := now.Add(lim.Near)
	want := heldPast(r.Start, r.end(), r.count(), from)
	if want == 0 || !r.Start.After(now.Add(lim.Prompt)) {
		return nil
	}
	var class []*Allocation
	var held time.Duration
	for _, a := range c.sorted() {
		if !a.Start.After(now) || !in(a.ID) {
			continue // started: use, attended or stopped
		}
		if h := heldPast(a.Start, a.End, len(a.GPUIDs), from); h > 0 {
			class = append(class, a)
			held += h
		}
	}
	if held+want > lim.GPUTime {
		return refuse(AdmissionHoldLimit, "renters with no history here hold %s of GPU time past %s; %s more would pass the %s they may hold together",
			gpuHours(held), calTime(from), gpuHours(want), gpuHours(lim.GPUTime))
	}
	if peak := peakHeld(class, maxTime(r.Start, from), r.end()); peak+r.count() > lim.GPUs {
		return refuse(AdmissionHoldLimit, "renters with no history here hold %d GPUs at once over [%s, %s); %d more would pass the %d they may hold together",
			peak, calTime(maxTime(r.Start, from)), calTime(r.end()), r.count(), lim.GPUs)
	}
	return nil
}

// heldPast is the GPU time gpus slots held over [s, e) spend past from.
func heldPast(s, e time.Time, gpus int, from time.Time) time.Duration {
	s = maxTime(s, from)
	if !e.After(s) {
		return 0
	}
	return time.Duration(gpus) * e.Sub(s)
}

// peakHeld is the most slots the allocations hold at one instant of
// [s, e).
func peakHeld(allocs []*Allocation, s, e time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, a := range allocs {
		if a.Start.Before(e) && s.Before(a.End) {
			edges = append(edges, edge{maxTime(a.Start, s), len(a.GPUIDs)}, edge{a.End, -len(a.GPUIDs)})
		}
	}
	// Ends before starts at one instant: intervals are half-open.
	slices.SortFunc(edges, func(x, y edge) int {
		if d := x.at.Compare(y.at); d != 0 {
			return d
		}
		return x.delta - y.delta
	})
	peak, now := 0, 0
	for _, ed := range edges {
		now += ed.delta
		peak = max(peak, now)
	}
	return peak
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// gpuHours renders GPU time as GPU-hours.
func gpuHours(d time.Duration) string {
	return fmt.Sprintf("%.1f GPU-hours", d.Hours())
}
