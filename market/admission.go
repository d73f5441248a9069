package market

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
)

// maxExactCandidates bounds the bronze allocations among which Admit
// searches exhaustively for the fewest to preempt (2^16 subsets at most);
// above it Admit chooses greedily.
const maxExactCandidates = 16

// LeaseRequest asks a calendar for GPU slots over the half-open interval
// [Start, Start+Duration).
type LeaseRequest struct {
	// ID names the lease; it must not be held by another allocation.
	ID string
	// GPUs is how many slots are wanted when any will do. With GPUIDs set
	// it must be 0 or len(GPUIDs).
	GPUs int
	// GPUIDs names the very slots wanted, if the renter needs those.
	GPUIDs []string
	// Start is when the lease begins; it must not be before now.
	Start time.Time
	// Duration is how long the lease runs.
	Duration time.Duration
	// Tier is the service level: gold and silver may preempt bronze.
	Tier pb.Tier
	// PriceMicros is the price offered per GPU-hour; it must reach the
	// floor of every window the lease touches.
	PriceMicros uint64
}

// normal returns r with monotonic clock readings stripped, so times
// compare by the wall clock alone.
func (r LeaseRequest) normal() LeaseRequest {
	r.Start = r.Start.Round(0)
	return r
}

// end is when r's lease would end.
func (r LeaseRequest) end() time.Time { return r.Start.Add(r.Duration) }

// count is the number of slots r wants.
func (r LeaseRequest) count() int {
	if len(r.GPUIDs) > 0 {
		return len(r.GPUIDs)
	}
	return r.GPUs
}

// Decision is Admit's plan for a request: which slots it gets and which
// bronze allocations must make way. Pass it to Commit to apply it.
type Decision struct {
	// GPUIDs are the slots the lease gets, in the calendar's slot order.
	GPUIDs []string
	// Preempt lists the bronze allocations to cut, by allocation ID.
	Preempt []Preemption
	// FloorMicros is the highest floor of the windows the lease touches.
	FloorMicros uint64
}

// Preemption tells a bronze lease to make way.
type Preemption struct {
	// AllocationID is the bronze lease preempted.
	AllocationID string
	// GPUIDs are all the slots it holds; it loses them all.
	GPUIDs []string
	// NoticeEnds is the allocation's new end, when its renter must be off
	// the GPUs: the later of its start and the new lease's start, and never
	// before now plus the calendar's bronze notice. At its start it means
	// the allocation is cancelled before it begins.
	NoticeEnds time.Time
}

// AdmissionCode says why a request was refused.
type AdmissionCode int

// Reasons for refusing a request.
const (
	// AdmissionBadRequest: the request or decision is malformed (zero
	// duration or GPUs, unknown GPU, unknown tier, lease ID in use).
	AdmissionBadRequest AdmissionCode = iota + 1
	// AdmissionStartInPast: the lease would start before now.
	AdmissionStartInPast
	// AdmissionNotAvailable: the lease leaves the availability windows.
	AdmissionNotAvailable
	// AdmissionBelowFloor: the price is under the highest floor of the
	// windows the lease touches.
	AdmissionBelowFloor
	// AdmissionNoCapacity: too few slots are free or freeable by
	// preempting bronze leases.
	AdmissionNoCapacity
	// AdmissionStale: Commit found the calendar changed since Admit.
	AdmissionStale
	// AdmissionHoldLimit: the renter's class holds what it may of the
	// calendar ahead (CheckHolds).
	AdmissionHoldLimit
)

var admissionCodeNames = map[AdmissionCode]string{
	AdmissionBadRequest:   "bad request",
	AdmissionStartInPast:  "start in past",
	AdmissionNotAvailable: "not available",
	AdmissionBelowFloor:   "below floor",
	AdmissionNoCapacity:   "no capacity",
	AdmissionStale:        "stale decision",
	AdmissionHoldLimit:    "hold limit",
}

// String names the code.
func (c AdmissionCode) String() string {
	if s, ok := admissionCodeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("AdmissionCode(%d)", int(c))
}

// AdmissionError is a refusal of a lease request: a legitimate "does not
// fit, because…", not an internal failure.
type AdmissionError struct {
	// Code classifies the refusal.
	Code AdmissionCode
	// Reason says what exactly does not fit.
	Reason string
}

// Error says what was refused and why.
func (e *AdmissionError) Error() string {
	return "admission refused: " + e.Code.String() + ": " + e.Reason
}

// refuse returns an *AdmissionError.
func refuse(code AdmissionCode, format string, a ...any) error {
	return &AdmissionError{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// Admit decides at now whether r fits and how: which slots it gets, free
// ones first in slot order, and, for gold and silver only, which bronze
// allocations to preempt when free slots are too few. It preempts the
// fewest bronze allocations; among equally few it prefers those started
// latest (they lose the least work), then by ID. Gold and silver are never
// preempted; bronze never preempts. Admit does not change the calendar; a
// refusal is an *AdmissionError.
func (c *Calendar) Admit(r LeaseRequest, now time.Time) (Decision, error) {
	r, now = r.normal(), now.Round(0)
	floor, err := c.check(r, now)
	if err != nil {
		return Decision{}, err
	}
	blocked := c.blockers(r.Start, r.end())
	var slots []int
	if len(r.GPUIDs) > 0 {
		slots, _ = c.slotsOf(r.GPUIDs) // checked by c.check
		if err := c.freeable(r, slots, blocked, now); err != nil {
			return Decision{}, err
		}
	} else if slots, err = c.pick(r, blocked, now); err != nil {
		return Decision{}, err
	}
	return Decision{
		GPUIDs:      c.ids(slots),
		Preempt:     c.preemptions(r, slots, blocked),
		FloorMicros: floor,
	}, nil
}

// check applies every test of r that does not depend on the slots chosen,
// and returns the floor that applies to it.
func (c *Calendar) check(r LeaseRequest, now time.Time) (uint64, error) {
	if err := c.checkShape(r); err != nil {
		return 0, err
	}
	if r.Start.Before(now) {
		return 0, refuse(AdmissionStartInPast, "starts at %s, before now %s", calTime(r.Start), calTime(now))
	}
	gap, ok, floor := c.cover(r.Start, r.end())
	if !ok {
		return 0, refuse(AdmissionNotAvailable, "lease [%s, %s) leaves the availability windows at %s", calTime(r.Start), calTime(r.end()), calTime(gap))
	}
	if r.PriceMicros < floor {
		return 0, refuse(AdmissionBelowFloor, "offers %d micros per GPU-hour; the floor over [%s, %s) is %d", r.PriceMicros, calTime(r.Start), calTime(r.end()), floor)
	}
	return floor, nil
}

// checkShape refuses a malformed request.
func (c *Calendar) checkShape(r LeaseRequest) error {
	switch {
	case r.ID == "":
		return refuse(AdmissionBadRequest, "empty lease ID")
	case c.allocs[r.ID] != nil:
		return refuse(AdmissionBadRequest, "lease ID %q already holds an allocation", clip(r.ID))
	case r.Duration <= 0:
		return refuse(AdmissionBadRequest, "duration %s; want more than 0", r.Duration)
	case r.Tier < pb.Tier_TIER_GOLD || r.Tier > pb.Tier_TIER_BRONZE:
		return refuse(AdmissionBadRequest, "tier %v; want gold, silver or bronze", r.Tier)
	case len(r.GPUIDs) > 0 && r.GPUs != 0 && r.GPUs != len(r.GPUIDs):
		return refuse(AdmissionBadRequest, "GPUs %d disagrees with %d GPU IDs", r.GPUs, len(r.GPUIDs))
	case r.count() <= 0 || r.count() > len(c.gpus):
		return refuse(AdmissionBadRequest, "%d GPUs; want 1 to %d", r.count(), len(c.gpus))
	}
	if _, err := c.slotsOf(r.GPUIDs); err != nil {
		return refuse(AdmissionBadRequest, "%s", err)
	}
	return nil
}

// preemptible returns the new end of the allocation a if the request r may
// preempt it at now, or else why not.
func (c *Calendar) preemptible(a *Allocation, r LeaseRequest, now time.Time) (time.Time, string) {
	switch {
	case r.Tier == pb.Tier_TIER_BRONZE:
		return time.Time{}, fmt.Sprintf("%s is in the way and bronze never preempts", describe(a))
	case a.Tier != pb.Tier_TIER_BRONZE:
		return time.Time{}, fmt.Sprintf("%s is never preempted", describe(a))
	}
	cut := newEnd(a, r)
	if earliest := now.Add(c.notice); cut.Before(earliest) {
		return time.Time{}, fmt.Sprintf("%s cannot be made to end before %s (notice %s)", describe(a), calTime(earliest), c.notice)
	}
	return cut, ""
}

// newEnd is where preempting the bronze allocation a for r cuts it: at
// r's start, or at a's own start (cancelling it) if a starts later.
func newEnd(a *Allocation, r LeaseRequest) time.Time {
	if r.Start.After(a.Start) {
		return r.Start
	}
	return a.Start
}

// stuck says why slot i cannot be freed for r at now, or "" if it is free
// or preempting the allocations in its way frees it.
func (c *Calendar) stuck(r LeaseRequest, i int, blocked [][]*Allocation, now time.Time) string {
	for _, a := range blocked[i] {
		if _, why := c.preemptible(a, r, now); why != "" {
			return "GPU " + c.gpus[i] + ": " + why
		}
	}
	return ""
}

// freeable checks that every slot in slots is free or freed by preempting
// the allocations in its way.
func (c *Calendar) freeable(r LeaseRequest, slots []int, blocked [][]*Allocation, now time.Time) error {
	for _, i := range slots {
		if why := c.stuck(r, i, blocked, now); why != "" {
			return refuse(AdmissionNoCapacity, "%s", why)
		}
	}
	return nil
}

// pick chooses r.GPUs slots: free ones first, then ones freed by
// preempting the fewest bronze allocations.
func (c *Calendar) pick(r LeaseRequest, blocked [][]*Allocation, now time.Time) ([]int, error) {
	var free, freeable []int
	why := ""
	for i := range c.gpus {
		switch s := c.stuck(r, i, blocked, now); {
		case len(blocked[i]) == 0:
			free = append(free, i)
		case s == "":
			freeable = append(freeable, i)
		case why == "":
			why = "; " + s
		}
	}
	need := r.GPUs - len(free)
	if need <= 0 {
		return free[:r.GPUs], nil
	}
	if len(freeable) < need {
		return nil, refuse(AdmissionNoCapacity, "%d GPUs wanted over [%s, %s): %d free, %d freeable by preempting bronze%s",
			r.GPUs, calTime(r.Start), calTime(r.end()), len(free), len(freeable), why)
	}
	slots := append(free, choosePreempted(freeable, blocked, need)...)
	slices.Sort(slots)
	return slots, nil
}

// preemptions lists the allocations in the way of slots, by ID, with their
// new ends. Every one of them is preemptible: the callers checked.
func (c *Calendar) preemptions(r LeaseRequest, slots []int, blocked [][]*Allocation) []Preemption {
	var out []Preemption
	seen := make(map[string]bool)
	for _, i := range slots {
		for _, a := range blocked[i] {
			if seen[a.ID] {
				continue
			}
			seen[a.ID] = true
			out = append(out, Preemption{AllocationID: a.ID, GPUIDs: slices.Clone(a.GPUIDs), NoticeEnds: newEnd(a, r)})
		}
	}
	slices.SortFunc(out, func(a, b Preemption) int { return strings.Compare(a.AllocationID, b.AllocationID) })
	return out
}

// choosePreempted returns need of the freeable slots, in slot order, such
// that the bronze allocations in their way are as few as it can find:
// the fewest when there are at most maxExactCandidates of them.
func choosePreempted(freeable []int, blocked [][]*Allocation, need int) []int {
	cands := candidates(freeable, blocked)
	if len(cands) > maxExactCandidates {
		return greedyPreempted(freeable, blocked, need)
	}
	bit := make(map[*Allocation]uint32, len(cands))
	for j, a := range cands {
		bit[a] = 1 << j
	}
	masks := make([]uint32, len(freeable))
	for k, i := range freeable {
		for _, a := range blocked[i] {
			masks[k] |= bit[a]
		}
	}
	// Subsets by size, each size in lexicographic order of the preferred
	// candidates; the set of all candidates frees every freeable slot.
	for size := 1; size <= len(cands); size++ {
		comb := make([]int, size)
		for j := range comb {
			comb[j] = j
		}
		for ok := true; ok; ok = nextCombination(comb, len(cands)) {
			var set uint32
			for _, j := range comb {
				set |= 1 << j
			}
			var got []int
			for k, i := range freeable {
				if masks[k]&^set == 0 && len(got) < need {
					got = append(got, i)
				}
			}
			if len(got) == need {
				return got
			}
		}
	}
	return freeable[:need] // unreachable: all candidates free all slots
}

// candidates returns the allocations in the way of the freeable slots,
// most recently started first, then by ID.
func candidates(freeable []int, blocked [][]*Allocation) []*Allocation {
	var out []*Allocation
	for _, i := range freeable {
		for _, a := range blocked[i] {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b *Allocation) int {
		if d := b.Start.Compare(a.Start); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// nextCombination advances comb, ascending indexes below n, to the next
// combination in lexicographic order; false when comb was the last.
func nextCombination(comb []int, n int) bool {
	k := len(comb)
	for j := k - 1; j >= 0; j-- {
		if comb[j] < n-k+j {
			comb[j]++
			for l := j + 1; l < k; l++ {
				comb[l] = comb[l-1] + 1
			}
			return true
		}
	}
	return false
}

// greedyPreempted picks slots one at a time, each the freeable slot whose
// way is cleared by the fewest allocations not yet chosen (the first in
// slot order among equals), and returns them in slot order.
func greedyPreempted(freeable []int, blocked [][]*Allocation, need int) []int {
	chosen := make(map[*Allocation]bool)
	taken := make([]bool, len(freeable))
	var got []int
	for len(got) < need {
		best, bestCost := -1, 0
		for k, i := range freeable {
			if taken[k] {
				continue
			}
			cost := 0
			for _, a := range blocked[i] {
				if !chosen[a] {
					cost++
				}
			}
			if best < 0 || cost < bestCost {
				best, bestCost = k, cost
			}
		}
		taken[best] = true
		for _, a := range blocked[freeable[best]] {
			chosen[a] = true
		}
		got = append(got, freeable[best])
	}
	slices.Sort(got)
	return got
}

// describe names an allocation for reasons.
func describe(a *Allocation) string {
	tier := strings.ToLower(strings.TrimPrefix(a.Tier.String(), "TIER_"))
	return fmt.Sprintf("%s lease %q [%s, %s)", tier, clip(a.ID), calTime(a.Start), calTime(a.End))
}
