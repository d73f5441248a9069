package market

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
)

// calWeek is the period of weekly windows, which start on Monday 00:00 UTC.
const calWeek = 7 * 24 * time.Hour

// Availability says when a provider's GPUs may be leased and the lowest
// price per GPU-hour in each window. With no windows at all the GPUs are
// always available with no floor.
//
// A lease must lie wholly inside the union of the windows: it may run from
// one window into the next only where they touch (one ends where the next
// starts, including a weekly window ending Sunday 24:00 and one starting
// Monday 00:00) or overlap. Windows of both kinds may be chained. The floor
// of a lease is the highest floor of every window it intersects.
type Availability struct {
	// Windows are one-off windows, half-open [start, end).
	Windows []*pb.Interval
	// Weekly are windows that recur every week, in UTC minutes since
	// Monday 00:00, half-open [start, end).
	Weekly []*pb.WeeklyWindow
}

// Allocation is a committed lease's hold on GPU slots over the half-open
// interval [Start, End).
type Allocation struct {
	// ID is the lease's ID, unique among the calendar's allocations.
	ID string
	// GPUIDs are the slots held, in the calendar's slot order.
	GPUIDs []string
	// Start and End bound the hold; End moves earlier on preemption or
	// release.
	Start, End time.Time
	// Tier is the lease's service level; only bronze is ever preempted.
	Tier pb.Tier
	// PriceMicros is the agreed price per GPU-hour.
	PriceMicros uint64
}

// clone returns a copy that shares no slice with a.
func (a *Allocation) clone() Allocation {
	c := *a
	c.GPUIDs = slices.Clone(a.GPUIDs)
	return c
}

// Calendar is a provider's schedule of GPU slots: it admits lease requests
// against its availability windows, floors and existing allocations, and
// records the leases it commits. Intervals are half-open, so a lease may
// start the instant another ends.
//
// A Calendar holds mutable state and is not safe for concurrent use: it
// belongs to one owner (the node's owner goroutine), which serialises every
// call. It never reads the clock; callers pass now.
type Calendar struct {
	gpus   []string       // slot IDs in the order given; choices follow it
	slot   map[string]int // slot ID -> index in gpus
	oneOff []calSpan
	weekly []calWeekly
	notice time.Duration // bronze notice period
	allocs map[string]*Allocation
}

// calSpan is a one-off window in absolute time.
type calSpan struct {
	start, end time.Time
	floor      uint64
}

// calWeekly is a weekly window as offsets from Monday 00:00 UTC.
type calWeekly struct {
	start, end time.Duration
	floor      uint64
}

// NewCalendar returns an empty calendar over the GPU slots gpus (GPU UUIDs
// or indexes such as "0".."7"), available as avail says; bronzeNotice is
// the least warning a bronze lease gets before it is preempted. A bad
// argument is reported as a *FieldError.
func NewCalendar(gpus []string, avail Availability, bronzeNotice time.Duration) (*Calendar, error) {
	if len(gpus) == 0 {
		return nil, fmt.Errorf("calendar: %w", invalid("gpus", "none; want at least one slot"))
	}
	if bronzeNotice < 0 {
		return nil, fmt.Errorf("calendar: %w", invalid("bronze_notice", "%s; want 0 or more", bronzeNotice))
	}
	c := &Calendar{
		gpus:   slices.Clone(gpus),
		slot:   make(map[string]int, len(gpus)),
		notice: bronzeNotice,
		allocs: make(map[string]*Allocation),
	}
	for i, id := range gpus {
		if id == "" {
			return nil, fmt.Errorf("calendar: %w", invalid(indexed("gpus", i), "empty slot ID"))
		}
		if _, dup := c.slot[id]; dup {
			return nil, fmt.Errorf("calendar: %w", invalid(indexed("gpus", i), "%q listed twice", clip(id)))
		}
		c.slot[id] = i
	}
	if err := c.setWindows(avail); err != nil {
		return nil, fmt.Errorf("calendar: %w", err)
	}
	return c, nil
}

// setWindows copies avail into the calendar, so later changes to the
// caller's messages do not reach it.
func (c *Calendar) setWindows(avail Availability) error {
	for i, w := range avail.Windows {
		if w.GetEndUnixMs() <= w.GetStartUnixMs() {
			return invalid(indexed("windows", i), "ends at %s, not after its start %s", ms(w.GetEndUnixMs()), ms(w.GetStartUnixMs()))
		}
		c.oneOff = append(c.oneOff, calSpan{
			start: time.UnixMilli(w.StartUnixMs).UTC(),
			end:   time.UnixMilli(w.EndUnixMs).UTC(),
			floor: w.FloorMicros,
		})
	}
	maxMin := uint32(calWeek / time.Minute)
	for i, w := range avail.Weekly {
		if w.GetEndMinute() <= w.GetStartMinute() || w.GetEndMinute() > maxMin {
			return invalid(indexed("weekly", i), "minutes %d-%d; want start < end <= %d", w.GetStartMinute(), w.GetEndMinute(), maxMin)
		}
		c.weekly = append(c.weekly, calWeekly{
			start: time.Duration(w.StartMinute) * time.Minute,
			end:   time.Duration(w.EndMinute) * time.Minute,
			floor: w.FloorMicros,
		})
	}
	return nil
}

// Commit records the lease r as planned by d, a decision Admit returned
// for r, after checking at now that it still holds: r is still admissible,
// and the allocations that overlap it on d.GPUIDs are exactly those d
// preempts, each still preemptible with the same end. Each preempted bronze
// allocation is cut to end at its NoticeEnds, or dropped if that is not
// after its start. A decision overtaken by other changes fails with
// AdmissionStale; admit again.
func (c *Calendar) Commit(r LeaseRequest, d Decision, now time.Time) (Allocation, error) {
	r, now = r.normal(), now.Round(0)
	if _, err := c.check(r, now); err != nil {
		return Allocation{}, err
	}
	slots, err := c.decisionSlots(r, d)
	if err != nil {
		return Allocation{}, err
	}
	cuts, err := c.recheckPreemptions(r, d, slots, now)
	if err != nil {
		return Allocation{}, err
	}
	for id, cut := range cuts {
		a := c.allocs[id]
		if cut.After(a.Start) {
			a.End = cut
		} else {
			delete(c.allocs, id)
		}
	}
	a := &Allocation{
		ID:          r.ID,
		GPUIDs:      c.ids(slots),
		Start:       r.Start,
		End:         r.end(),
		Tier:        r.Tier,
		PriceMicros: r.PriceMicros,
	}
	c.allocs[a.ID] = a
	return a.clone(), nil
}

// decisionSlots checks that d names the GPUs r asked for, and returns
// their slot indexes in slot order.
func (c *Calendar) decisionSlots(r LeaseRequest, d Decision) ([]int, error) {
	slots, err := c.slotsOf(d.GPUIDs)
	if err != nil {
		return nil, refuse(AdmissionBadRequest, "decision: %s", err)
	}
	if len(slots) != r.count() {
		return nil, refuse(AdmissionBadRequest, "decision names %d GPUs; the request asks for %d", len(slots), r.count())
	}
	if len(r.GPUIDs) > 0 {
		want, _ := c.slotsOf(r.GPUIDs) // checked by c.check
		if !slices.Equal(want, slots) {
			return nil, refuse(AdmissionBadRequest, "decision names GPUs %s; the request asks for %s", strings.Join(d.GPUIDs, ","), strings.Join(r.GPUIDs, ","))
		}
	}
	return slots, nil
}

// recheckPreemptions returns the new end of every allocation d preempts,
// by ID, or AdmissionStale if the allocations in the way are no longer
// exactly those d names, or no longer preemptible as d says.
func (c *Calendar) recheckPreemptions(r LeaseRequest, d Decision, slots []int, now time.Time) (map[string]time.Time, error) {
	named := make(map[string]time.Time, len(d.Preempt))
	for _, p := range d.Preempt {
		if _, dup := named[p.AllocationID]; dup {
			return nil, refuse(AdmissionBadRequest, "decision preempts lease %q twice", clip(p.AllocationID))
		}
		named[p.AllocationID] = p.NoticeEnds
	}
	blocked := c.blockers(r.Start, r.end())
	cuts := make(map[string]time.Time, len(named))
	for _, i := range slots {
		for _, a := range blocked[i] {
			end, ok := named[a.ID]
			if !ok {
				return nil, refuse(AdmissionStale, "GPU %s is held by %s, which the decision does not preempt", c.gpus[i], describe(a))
			}
			cut, why := c.preemptible(a, r, now)
			if why != "" {
				return nil, refuse(AdmissionStale, "%s", why)
			}
			if !cut.Equal(end) {
				return nil, refuse(AdmissionStale, "%s would now end at %s, not %s", describe(a), calTime(cut), calTime(end))
			}
			cuts[a.ID] = cut
		}
	}
	for id := range named {
		if _, ok := cuts[id]; !ok {
			return nil, refuse(AdmissionStale, "decision preempts lease %q, which no longer holds any of its GPUs then", clip(id))
		}
	}
	return cuts, nil
}

// Release ends the allocation id at at, if that is before its end; at or
// before its start drops it. It reports whether the calendar held id.
func (c *Calendar) Release(id string, at time.Time) bool {
	a, ok := c.allocs[id]
	if !ok {
		return false
	}
	switch {
	case !at.After(a.Start):
		delete(c.allocs, id)
	case at.Before(a.End):
		a.End = at.Round(0)
	}
	return true
}

// Restore puts back an allocation committed before a restart, as it was:
// no admission check applies, since the lease was signed then. It fails
// only for a slot the calendar does not have or an ID already held.
func (c *Calendar) Restore(a Allocation) error {
	if _, ok := c.allocs[a.ID]; ok {
		return refuse(AdmissionBadRequest, "lease ID %q already held", a.ID)
	}
	if _, err := c.slotsOf(a.GPUIDs); err != nil {
		return err
	}
	r := a.clone()
	r.Start, r.End = r.Start.Round(0), r.End.Round(0)
	c.allocs[a.ID] = &r
	return nil
}

// Extend moves allocation id's end later, to end, when its GPUs are free
// of other allocations from its end to end (none is preempted for it) and
// the windows cover that time at floors no higher than its price. An
// allocation cut short (preempted, released) is not extended.
func (c *Calendar) Extend(id string, end time.Time) error {
	a, ok := c.allocs[id]
	if !ok {
		return refuse(AdmissionBadRequest, "lease %q holds no GPUs here", clip(id))
	}
	end = end.Round(0)
	if !end.After(a.End) {
		return refuse(AdmissionBadRequest, "lease %q ends at %s; an extension must end later, not at %s", clip(id), calTime(a.End), calTime(end))
	}
	gap, covered, floor := c.cover(a.End, end)
	switch {
	case !covered:
		return refuse(AdmissionNotAvailable, "the provider's GPUs are not offered from %s", calTime(gap))
	case floor > a.PriceMicros:
		return refuse(AdmissionBelowFloor, "the floor from %s is %s per GPU-hour, above the lease's %s", calTime(a.End), FormatPrice(floor), FormatPrice(a.PriceMicros))
	}
	blocked := c.blockers(a.End, end)
	for _, g := range a.GPUIDs {
		for _, b := range blocked[c.slot[g]] {
			if b.ID != id {
				return refuse(AdmissionNoCapacity, "GPU %s is held by %s", g, describe(b))
			}
		}
	}
	a.End = end
	return nil
}

// Slots is how many GPU slots the calendar holds.
func (c *Calendar) Slots() int { return len(c.gpus) }

// Prune drops every allocation that has ended by now.
func (c *Calendar) Prune(now time.Time) {
	for id, a := range c.allocs {
		if !a.End.After(now) {
			delete(c.allocs, id)
		}
	}
}

// Allocation returns a copy of allocation id, if the calendar holds it.
func (c *Calendar) Allocation(id string) (Allocation, bool) {
	a, ok := c.allocs[id]
	if !ok {
		return Allocation{}, false
	}
	return a.clone(), true
}

// Allocations returns copies of the calendar's allocations, by start and
// then ID.
func (c *Calendar) Allocations() []Allocation {
	out := make([]Allocation, 0, len(c.allocs))
	for _, a := range c.sorted() {
		out = append(out, a.clone())
	}
	return out
}

// sorted returns the allocations by start and then ID.
func (c *Calendar) sorted() []*Allocation {
	out := make([]*Allocation, 0, len(c.allocs))
	for _, a := range c.allocs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *Allocation) int {
		if d := a.Start.Compare(b.Start); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// blockers returns, per slot, the allocations that overlap [s, e) on it,
// by start and then ID.
func (c *Calendar) blockers(s, e time.Time) [][]*Allocation {
	out := make([][]*Allocation, len(c.gpus))
	for _, a := range c.sorted() {
		if !a.Start.Before(e) || !s.Before(a.End) {
			continue
		}
		for _, g := range a.GPUIDs {
			i := c.slot[g]
			out[i] = append(out[i], a)
		}
	}
	return out
}

// slotsOf returns the slot indexes of ids in slot order; an unknown or
// repeated ID is an error.
func (c *Calendar) slotsOf(ids []string) ([]int, error) {
	out := make([]int, 0, len(ids))
	seen := make(map[int]bool, len(ids))
	for _, id := range ids {
		i, ok := c.slot[id]
		if !ok {
			return nil, fmt.Errorf("unknown GPU %q", clip(id))
		}
		if seen[i] {
			return nil, fmt.Errorf("GPU %q named twice", clip(id))
		}
		seen[i] = true
		out = append(out, i)
	}
	slices.Sort(out)
	return out, nil
}

// ids returns the slot IDs of the slot indexes.
func (c *Calendar) ids(slots []int) []string {
	out := make([]string, len(slots))
	for j, i := range slots {
		out[j] = c.gpus[i]
	}
	return out
}

// cover reports whether the windows cover [s, e) without a gap, and if not,
// the first instant left uncovered; and the highest floor among the windows
// that intersect [s, e).
func (c *Calendar) cover(s, e time.Time) (gap time.Time, covered bool, floor uint64) {
	if len(c.oneOff) == 0 && len(c.weekly) == 0 {
		return time.Time{}, true, 0
	}
	for at := s; at.Before(e); {
		next := c.reach(at)
		if !next.After(at) {
			return at, false, 0
		}
		at = next
	}
	return time.Time{}, true, c.floor(s, e)
}

// reach returns the latest end among the windows that contain t, or t if
// none does.
func (c *Calendar) reach(t time.Time) time.Time {
	out := t
	for _, w := range c.oneOff {
		if !t.Before(w.start) && t.Before(w.end) && w.end.After(out) {
			out = w.end
		}
	}
	ws := calWeekStart(t)
	off := t.Sub(ws)
	for _, w := range c.weekly {
		if off >= w.start && off < w.end {
			if end := ws.Add(w.end); end.After(out) {
				out = end
			}
		}
	}
	return out
}

// floor returns the highest floor among the windows that intersect [s, e).
func (c *Calendar) floor(s, e time.Time) uint64 {
	var out uint64
	for _, w := range c.oneOff {
		if w.start.Before(e) && s.Before(w.end) {
			out = max(out, w.floor)
		}
	}
	// An occurrence from the week before s ends by the start of s's week;
	// a lease shorter than a week ends before the week after next.
	ws := calWeekStart(s)
	for _, w := range c.weekly {
		for _, base := range []time.Time{ws, ws.Add(calWeek)} {
			if e.Sub(s) >= calWeek || (base.Add(w.start).Before(e) && s.Before(base.Add(w.end))) {
				out = max(out, w.floor)
			}
		}
	}
	return out
}

// calWeekStart returns Monday 00:00 UTC of the week holding t.
func calWeekStart(t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return day.AddDate(0, 0, -int((t.Weekday()+6)%7))
}

// calTime renders a time for reasons.
func calTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
