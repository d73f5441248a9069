package market

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"pgregory.net/rapid"
)

// calT0 is a Monday, 00:00 UTC.
var calT0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

const (
	calGold   = pb.Tier_TIER_GOLD
	calSilver = pb.Tier_TIER_SILVER
	calBronze = pb.Tier_TIER_BRONZE
)

// calAt is calT0 plus h hours.
func calAt(h float64) time.Time { return calT0.Add(time.Duration(h * float64(time.Hour))) }

// calLease asks for n GPUs of tier from hour start for dur hours at 1000 micros.
func calLease(id string, n int, tier pb.Tier, start, dur float64) LeaseRequest {
	return LeaseRequest{ID: id, GPUs: n, Start: calAt(start), Duration: time.Duration(dur * float64(time.Hour)), Tier: tier, PriceMicros: 1000}
}

// calOn returns r asking for the named GPUs instead of a count.
func calOn(r LeaseRequest, ids ...string) LeaseRequest {
	r.GPUs, r.GPUIDs = 0, ids
	return r
}

// calHeld asks for the named GPUs of tier from hour start for dur hours.
func calHeld(id string, tier pb.Tier, start, dur float64, ids ...string) LeaseRequest {
	return calOn(calLease(id, 0, tier, start, dur), ids...)
}

// calTB is what the helpers need of *testing.T and *rapid.T.
type calTB interface {
	Helper()
	Fatalf(format string, args ...any)
}

func calSlots(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func newCalendarT(t calTB, n int, avail Availability, notice time.Duration) *Calendar {
	t.Helper()
	c, err := NewCalendar(calSlots(n), avail, notice)
	if err != nil {
		t.Fatalf("NewCalendar: %v", err)
	}
	return c
}

func admitCommit(t calTB, c *Calendar, r LeaseRequest, now time.Time) Allocation {
	t.Helper()
	d, err := c.Admit(r, now)
	if err != nil {
		t.Fatalf("admit %s: %v", r.ID, err)
	}
	a, err := c.Commit(r, d, now)
	if err != nil {
		t.Fatalf("commit %s: %v", r.ID, err)
	}
	return a
}

func calCode(err error) AdmissionCode {
	var ae *AdmissionError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

func calWeeklyWin(from, to uint32, floor uint64) *pb.WeeklyWindow {
	return &pb.WeeklyWindow{StartMinute: from, EndMinute: to, FloorMicros: floor}
}

// calOneOff is a one-off window from hour start to hour end.
func calOneOff(start, end float64, floor uint64) *pb.Interval {
	return &pb.Interval{StartUnixMs: calAt(start).UnixMilli(), EndUnixMs: calAt(end).UnixMilli(), FloorMicros: floor}
}

// calCut says that allocation id is preempted to end at hour h.
func calCut(id string, h float64) map[string]time.Time { return map[string]time.Time{id: calAt(h)} }

// admitCase sets up a calendar, commits existing at calT0, then admits req.
type admitCase struct {
	name     string
	gpus     int // slots "0".."gpus-1"; 4 if 0
	avail    Availability
	notice   time.Duration
	existing []LeaseRequest
	req      LeaseRequest
	now      time.Time // calT0 if zero
	code     AdmissionCode
	gpuIDs   []string
	preempt  map[string]time.Time // allocation ID -> NoticeEnds
	floor    uint64
}

func runAdmitCases(t *testing.T, cases []admitCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalendarT(t, cmp.Or(tc.gpus, 4), tc.avail, tc.notice)
			for _, r := range tc.existing {
				admitCommit(t, c, r, calT0)
			}
			d, err := c.Admit(tc.req, cmp.Or(tc.now, calT0))
			if got := calCode(err); got != tc.code || (err != nil && got == 0) {
				t.Fatalf("Admit: err %v; want code %v", err, tc.code)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.code.String()) {
					t.Errorf("error %q does not name %v", err, tc.code)
				}
				return
			}
			if !slices.Equal(d.GPUIDs, tc.gpuIDs) || d.FloorMicros != tc.floor {
				t.Errorf("GPUIDs %v, floor %d; want %v, %d", d.GPUIDs, d.FloorMicros, tc.gpuIDs, tc.floor)
			}
			got := make(map[string]time.Time)
			for _, p := range d.Preempt {
				got[p.AllocationID] = p.NoticeEnds
			}
			if !maps.EqualFunc(got, tc.preempt, time.Time.Equal) {
				t.Errorf("preempt %v; want %v", got, tc.preempt)
			}
		})
	}
}

func TestCalendarNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gpus   []string
		avail  Availability
		notice time.Duration
	}{
		{"no slots", nil, Availability{}, 0},
		{"empty slot", []string{"0", ""}, Availability{}, 0},
		{"duplicate slot", []string{"0", "0"}, Availability{}, 0},
		{"negative notice", []string{"0"}, Availability{}, -time.Second},
		{"empty one-off", []string{"0"}, Availability{Windows: []*pb.Interval{calOneOff(2, 2, 0)}}, 0},
		{"nil one-off", []string{"0"}, Availability{Windows: []*pb.Interval{nil}}, 0},
		{"weekly backwards", []string{"0"}, Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(60, 30, 0)}}, 0},
		{"weekly past week", []string{"0"}, Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(0, 7*24*60+1, 0)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCalendar(tc.gpus, tc.avail, tc.notice)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v; want ErrInvalid", err)
			}
		})
	}
}

func TestAdmitBadRequests(t *testing.T) {
	zeroDur := calLease("x", 1, calGold, 1, 1)
	zeroDur.Duration = 0
	noTier := calLease("x", 1, pb.Tier_TIER_UNSPECIFIED, 1, 1)
	mismatch := calHeld("x", calGold, 1, 1, "0", "1")
	mismatch.GPUs = 3
	runAdmitCases(t, []admitCase{
		{name: "zero duration", req: zeroDur, code: AdmissionBadRequest},
		{name: "zero GPUs", req: calLease("x", 0, calGold, 1, 1), code: AdmissionBadRequest},
		{name: "more GPUs than slots", req: calLease("x", 5, calGold, 1, 1), code: AdmissionBadRequest},
		{name: "unknown tier", req: noTier, code: AdmissionBadRequest},
		{name: "unknown GPU", req: calHeld("x", calGold, 1, 1, "9"), code: AdmissionBadRequest},
		{name: "GPU named twice", req: calHeld("x", calGold, 1, 1, "1", "1"), code: AdmissionBadRequest},
		{name: "count disagrees with IDs", req: mismatch, code: AdmissionBadRequest},
		{name: "empty ID", req: calLease("", 1, calGold, 1, 1), code: AdmissionBadRequest},
		{name: "ID in use", existing: []LeaseRequest{calLease("x", 1, calGold, 5, 1)}, req: calLease("x", 1, calGold, 1, 1), code: AdmissionBadRequest},
		{name: "start in past", req: calLease("x", 1, calGold, 1, 1), now: calAt(1.5), code: AdmissionStartInPast},
		{name: "start now", req: calLease("x", 1, calGold, 1, 1), now: calAt(1), gpuIDs: []string{"0"}},
	})
}

func TestAdmitCapacity(t *testing.T) {
	runAdmitCases(t, []admitCase{
		{name: "free", req: calLease("x", 2, calSilver, 1, 1), gpuIDs: []string{"0", "1"}},
		{name: "after others, free slots in order", existing: []LeaseRequest{calLease("a", 1, calSilver, 0, 4), calHeld("b", calGold, 0, 4, "2")},
			req: calLease("x", 2, calSilver, 1, 1), gpuIDs: []string{"1", "3"}},
		{name: "overlap refused", gpus: 2, existing: []LeaseRequest{calLease("a", 2, calSilver, 1, 2)},
			req: calLease("x", 1, calSilver, 2, 2), code: AdmissionNoCapacity},
		{name: "partial overlap at start refused", gpus: 1, existing: []LeaseRequest{calLease("a", 1, calSilver, 2, 2)},
			req: calLease("x", 1, calSilver, 1, 1.01), code: AdmissionNoCapacity},
		{name: "adjacent after (half-open)", gpus: 2, existing: []LeaseRequest{calLease("a", 2, calSilver, 1, 1)},
			req: calLease("x", 2, calSilver, 2, 1), gpuIDs: []string{"0", "1"}},
		{name: "adjacent before (half-open)", gpus: 2, existing: []LeaseRequest{calLease("a", 2, calSilver, 2, 1)},
			req: calLease("x", 2, calSilver, 1, 1), gpuIDs: []string{"0", "1"}},
		{name: "specific GPUs free", existing: []LeaseRequest{calLease("a", 2, calSilver, 0, 4)},
			req: calHeld("x", calGold, 1, 1, "3", "2"), gpuIDs: []string{"2", "3"}},
		{name: "specific GPU busy", existing: []LeaseRequest{calLease("a", 2, calSilver, 0, 4)},
			req: calHeld("x", calGold, 1, 1, "1", "2"), code: AdmissionNoCapacity},
		{name: "specific GPU free while others busy", gpus: 2, existing: []LeaseRequest{calHeld("a", calGold, 0, 4, "0")},
			req: calHeld("x", calGold, 1, 1, "1"), gpuIDs: []string{"1"}},
	})
}

func TestAdmitWindows(t *testing.T) {
	const day = 24 * 60
	monWork := Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(9*60, 17*60, 0)}}
	wrap := Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(0, 2*60, 0), calWeeklyWin(6*day+22*60, 7*day, 0)}}
	sunOnly := Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(6*day+22*60, 7*day, 0)}}
	one := Availability{Windows: []*pb.Interval{calOneOff(1, 5, 0)}}
	runAdmitCases(t, []admitCase{
		{name: "inside one-off", avail: one, req: calLease("x", 1, calGold, 2, 3), gpuIDs: []string{"0"}},
		{name: "whole one-off", avail: one, req: calLease("x", 1, calGold, 1, 4), gpuIDs: []string{"0"}},
		{name: "past one-off end", avail: one, req: calLease("x", 1, calGold, 2, 4), code: AdmissionNotAvailable},
		{name: "before one-off", avail: one, req: calLease("x", 1, calGold, 0.5, 1), code: AdmissionNotAvailable},
		{name: "contiguous one-offs", avail: Availability{Windows: []*pb.Interval{calOneOff(1, 3, 0), calOneOff(3, 5, 0)}},
			req: calLease("x", 1, calGold, 2, 2), gpuIDs: []string{"0"}},
		{name: "one-offs with a gap", avail: Availability{Windows: []*pb.Interval{calOneOff(1, 3, 0), calOneOff(3.5, 5, 0)}},
			req: calLease("x", 1, calGold, 2, 2), code: AdmissionNotAvailable},
		{name: "inside weekly", avail: monWork, req: calLease("x", 1, calGold, 10, 2), gpuIDs: []string{"0"}},
		{name: "weekly recurs next week", avail: monWork, req: calLease("x", 1, calGold, 7*24+9, 8), gpuIDs: []string{"0"}},
		{name: "weekly wrong day", avail: monWork, req: calLease("x", 1, calGold, 24+10, 2), code: AdmissionNotAvailable},
		{name: "past weekly end", avail: monWork, req: calLease("x", 1, calGold, 16, 2), code: AdmissionNotAvailable},
		{name: "week wrap Sunday to Monday", avail: wrap, req: calLease("x", 1, calGold, 6*24+23, 2.5), gpuIDs: []string{"0"}},
		{name: "week end without Monday window", avail: sunOnly, req: calLease("x", 1, calGold, 6*24+23, 2), code: AdmissionNotAvailable},
		{name: "up to Sunday 24:00", avail: sunOnly, req: calLease("x", 1, calGold, 6*24+23, 1), gpuIDs: []string{"0"}},
		{name: "one-off chained to weekly", avail: Availability{Windows: []*pb.Interval{calOneOff(5, 9, 0)}, Weekly: monWork.Weekly},
			req: calLease("x", 1, calGold, 6, 6), gpuIDs: []string{"0"}},
	})
}

func TestAdmitFloors(t *testing.T) {
	two := Availability{Windows: []*pb.Interval{calOneOff(1, 3, 100), calOneOff(3, 5, 300)}}
	at := func(r LeaseRequest, price uint64) LeaseRequest { r.PriceMicros = price; return r }
	runAdmitCases(t, []admitCase{
		{name: "no windows, no floor", req: at(calLease("x", 1, calGold, 1, 1), 0), gpuIDs: []string{"0"}},
		{name: "below floor", avail: two, req: at(calLease("x", 1, calGold, 1, 1), 99), code: AdmissionBelowFloor},
		{name: "at floor", avail: two, req: at(calLease("x", 1, calGold, 1, 1), 100), gpuIDs: []string{"0"}, floor: 100},
		{name: "spanning: highest floor refuses", avail: two, req: at(calLease("x", 1, calGold, 2, 2), 200), code: AdmissionBelowFloor},
		{name: "spanning: highest floor met", avail: two, req: at(calLease("x", 1, calGold, 2, 2), 300), gpuIDs: []string{"0"}, floor: 300},
		{name: "spanning: dearer window first", avail: Availability{Windows: []*pb.Interval{calOneOff(1, 3, 300), calOneOff(3, 5, 100)}},
			req: at(calLease("x", 1, calGold, 2, 2), 200), code: AdmissionBelowFloor},
		{name: "overlapping windows: highest floor", avail: Availability{Windows: []*pb.Interval{calOneOff(1, 9, 100)}, Weekly: []*pb.WeeklyWindow{calWeeklyWin(0, 2*60, 400)}},
			req: at(calLease("x", 1, calGold, 1, 2), 300), code: AdmissionBelowFloor},
		{name: "ends where the dearer window starts", avail: two, req: at(calLease("x", 1, calGold, 2, 1), 100), gpuIDs: []string{"0"}, floor: 100},
		{name: "weekly floor across the wrap", avail: Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(0, 60, 500), calWeeklyWin(7*24*60-60, 7*24*60, 50)}},
			req: at(calLease("x", 1, calGold, 7*24-0.5, 1), 400), code: AdmissionBelowFloor},
		{name: "weekly floor, week-long lease", avail: Availability{Weekly: []*pb.WeeklyWindow{calWeeklyWin(0, 7*24*60, 50), calWeeklyWin(60, 120, 700)}},
			req: at(calLease("x", 1, calGold, 3, 7*24), 700), gpuIDs: []string{"0"}, floor: 700},
	})
}

func TestAdmitPreemption(t *testing.T) {
	const notice = 10 * time.Minute
	bAll := []LeaseRequest{calLease("b", 2, calBronze, 0, 10)}
	runAdmitCases(t, []admitCase{
		{name: "gold preempts bronze", gpus: 2, notice: notice, existing: bAll, now: calAt(1), req: calLease("x", 1, calGold, 2, 1), gpuIDs: []string{"0"}, preempt: calCut("b", 2)},
		{name: "silver preempts bronze", gpus: 2, notice: notice, existing: bAll, now: calAt(1), req: calLease("x", 2, calSilver, 2, 1), gpuIDs: []string{"0", "1"}, preempt: calCut("b", 2)},
		{name: "start exactly at notice end", gpus: 2, notice: notice, existing: bAll, now: calAt(1), req: calLease("x", 1, calGold, 1+1.0/6, 1), gpuIDs: []string{"0"}, preempt: calCut("b", 1+1.0/6)},
		{name: "start within notice", gpus: 2, notice: notice, existing: bAll, now: calAt(1), req: calLease("x", 1, calGold, 1.1, 1), code: AdmissionNoCapacity},
		{name: "bronze not begun is cancelled", gpus: 1, notice: notice, existing: []LeaseRequest{calLease("b", 1, calBronze, 3, 2)},
			req: calLease("x", 1, calGold, 2, 2), gpuIDs: []string{"0"}, preempt: calCut("b", 3)},
		{name: "bronze never preempts", gpus: 2, notice: notice, existing: bAll, now: calAt(1), req: calLease("x", 1, calBronze, 2, 1), code: AdmissionNoCapacity},
		{name: "gold never preempted", gpus: 1, existing: []LeaseRequest{calLease("g", 1, calGold, 0, 10)},
			req: calLease("x", 1, calGold, 2, 1), code: AdmissionNoCapacity},
		{name: "silver not preempted", gpus: 1, existing: []LeaseRequest{calLease("s", 1, calSilver, 0, 10)},
			req: calLease("x", 1, calGold, 2, 1), code: AdmissionNoCapacity},
		{name: "free GPUs first", gpus: 3, existing: []LeaseRequest{calLease("b", 2, calBronze, 0, 10)},
			req: calLease("x", 1, calGold, 2, 1), gpuIDs: []string{"2"}},
		{name: "free plus preempted", gpus: 3, existing: []LeaseRequest{calLease("b", 2, calBronze, 0, 10)},
			req: calLease("x", 2, calGold, 2, 1), gpuIDs: []string{"0", "2"}, preempt: calCut("b", 2)},
		{name: "specific GPU held by bronze", gpus: 2, existing: []LeaseRequest{calHeld("b", calBronze, 0, 10, "1")},
			req: calHeld("x", calGold, 2, 1, "1"), gpuIDs: []string{"1"}, preempt: calCut("b", 2)},
		{name: "slot held by bronze and gold is stuck", gpus: 2, existing: []LeaseRequest{calHeld("b", calBronze, 0, 3, "0"), calHeld("g", calGold, 3, 3, "0"), calHeld("s", calSilver, 0, 9, "1")},
			req: calLease("x", 1, calGold, 2, 2), code: AdmissionNoCapacity},
		{name: "fewest: one wide bronze over two narrow ones",
			existing: []LeaseRequest{calHeld("a", calBronze, 0, 9, "0"), calHeld("b", calBronze, 0, 9, "1"), calHeld("c", calBronze, 0, 9, "2", "3")},
			req:      calLease("x", 2, calGold, 2, 1), gpuIDs: []string{"2", "3"}, preempt: calCut("c", 2)},
		{name: "fewest: slot with one blocker over slot with two", gpus: 2,
			existing: []LeaseRequest{calHeld("a", calBronze, 0, 2, "0"), calHeld("b", calBronze, 2, 2, "0"), calHeld("c", calBronze, 0, 9, "1")},
			req:      calLease("x", 1, calGold, 1, 2), gpuIDs: []string{"1"}, preempt: calCut("c", 1)},
		{name: "tie: latest started first", gpus: 2, existing: []LeaseRequest{calHeld("a", calBronze, 0.5, 9, "0"), calHeld("b", calBronze, 0, 9, "1")},
			req: calLease("x", 1, calGold, 2, 1), gpuIDs: []string{"0"}, preempt: calCut("a", 2)},
		{name: "tie: then by ID", gpus: 2, existing: []LeaseRequest{calHeld("z", calBronze, 0, 9, "0"), calHeld("m", calBronze, 0, 9, "1")},
			req: calLease("x", 1, calGold, 2, 1), gpuIDs: []string{"1"}, preempt: calCut("m", 2)},
	})
}

// TestAdmitManyCandidates takes the greedy path, with more bronze
// allocations in the way than Admit searches exhaustively.
func TestAdmitManyCandidates(t *testing.T) {
	const n = maxExactCandidates + 4
	var held []LeaseRequest
	all := make(map[string]time.Time)
	for i := range n {
		held = append(held, calHeld("b"+strconv.Itoa(100+i), calBronze, 0, 9, strconv.Itoa(i)))
		all["b"+strconv.Itoa(100+i)] = calAt(2)
	}
	runAdmitCases(t, []admitCase{
		{name: "all slots", gpus: n, existing: held, req: calLease("x", n, calGold, 2, 1), gpuIDs: calSlots(n), preempt: all},
		{name: "first slots", gpus: n, existing: held, req: calLease("x", 2, calGold, 2, 1), gpuIDs: []string{"0", "1"}, preempt: map[string]time.Time{"b100": calAt(2), "b101": calAt(2)}},
	})
}

func TestCalendarCommit(t *testing.T) {
	t.Run("records and cuts preempted", func(t *testing.T) {
		c := newCalendarT(t, 3, Availability{}, 10*time.Minute)
		admitCommit(t, c, calLease("b", 2, calBronze, 0, 10), calT0)
		admitCommit(t, c, calHeld("late", calBronze, 5, 2, "2"), calT0)
		x := admitCommit(t, c, calLease("x", 3, calGold, 2, 4), calAt(1))
		if !slices.Equal(x.GPUIDs, []string{"0", "1", "2"}) || !x.Start.Equal(calAt(2)) || !x.End.Equal(calAt(6)) {
			t.Fatalf("allocation %+v", x)
		}
		got := c.Allocations()
		if len(got) != 2 || got[0].ID != "b" || !got[0].End.Equal(calAt(2)) || got[1].ID != "x" {
			t.Fatalf("allocations %+v; want b cut at 2h and x, late cancelled", got)
		}
	})
	// Each case admits x (which preempts b), meddles, then commits.
	for _, tc := range []struct {
		name   string
		meddle func(c *Calendar, d *Decision)
		code   AdmissionCode
	}{
		{"slot taken by a lease on the same plan", func(c *Calendar, d *Decision) { c.Commit(calHeld("y", calSilver, 2, 1, "1"), *d, calT0) }, AdmissionStale},
		{"preempted lease released meanwhile", func(c *Calendar, d *Decision) { c.Release("b", calAt(1)) }, AdmissionStale},
		{"preemption dropped", func(c *Calendar, d *Decision) { d.Preempt = nil }, AdmissionStale},
		{"preemption invented", func(c *Calendar, d *Decision) { d.Preempt = append(d.Preempt, Preemption{AllocationID: "a"}) }, AdmissionStale},
		{"preemption named twice", func(c *Calendar, d *Decision) { d.Preempt = append(d.Preempt, d.Preempt[0]) }, AdmissionBadRequest},
		{"other notice end", func(c *Calendar, d *Decision) { d.Preempt[0].NoticeEnds = calAt(3) }, AdmissionStale},
		{"other GPUs", func(c *Calendar, d *Decision) { d.GPUIDs = []string{"0"} }, AdmissionBadRequest},
		{"unknown GPU", func(c *Calendar, d *Decision) { d.GPUIDs = []string{"9"} }, AdmissionBadRequest},
		{"committed twice", func(c *Calendar, d *Decision) { c.Commit(calHeld("x", calGold, 2, 2, "1"), *d, calT0) }, AdmissionBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalendarT(t, 2, Availability{}, 0)
			admitCommit(t, c, calHeld("a", calGold, 0, 9, "0"), calT0)
			admitCommit(t, c, calHeld("b", calBronze, 0, 9, "1"), calT0)
			r := calHeld("x", calGold, 2, 2, "1")
			d, err := c.Admit(r, calT0)
			if err != nil || len(d.Preempt) != 1 {
				t.Fatalf("admit: %v %+v", err, d)
			}
			tc.meddle(c, &d)
			if _, err := c.Commit(r, d, calT0); calCode(err) != tc.code {
				t.Fatalf("commit: %v; want %v", err, tc.code)
			}
		})
	}
}

func TestCalendarReleasePrune(t *testing.T) {
	release := func(id string, at float64, held bool) func(*Calendar) bool {
		return func(c *Calendar) bool { return c.Release(id, calAt(at)) == held }
	}
	prune := func(at float64) func(*Calendar) bool {
		return func(c *Calendar) bool { c.Prune(calAt(at)); return true }
	}
	for _, tc := range []struct {
		name string
		op   func(c *Calendar) bool // false if its result is wrong
		want string                 // allocations left, as ID@end-hour
	}{
		{"release unknown", release("zz", 1, false), "a@4 b@8 c@12"},
		{"release after end is a no-op", release("a", 5, true), "a@4 b@8 c@12"},
		{"release early", release("a", 2, true), "a@2 b@8 c@12"},
		{"release at start drops", release("b", 4, true), "a@4 c@12"},
		{"release before start drops", release("c", 7, true), "a@4 b@8"},
		{"prune ended", prune(8), "c@12"},
		{"prune keeps running", prune(3.9), "a@4 b@8 c@12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCalendarT(t, 1, Availability{}, 0)
			for i, id := range []string{"a", "b", "c"} {
				admitCommit(t, c, calLease(id, 1, calGold, float64(4*i), 4), calT0)
			}
			if !tc.op(c) {
				t.Error("wrong result")
			}
			var left []string
			for _, a := range c.Allocations() {
				left = append(left, fmt.Sprintf("%s@%g", a.ID, a.End.Sub(calT0).Hours()))
			}
			if got := strings.Join(left, " "); got != tc.want {
				t.Errorf("left %q; want %q", got, tc.want)
			}
		})
	}
}

func TestAdmitDoesNotMutate(t *testing.T) {
	avail := Availability{Windows: []*pb.Interval{calOneOff(0, 48, 10)}}
	c := newCalendarT(t, 2, avail, time.Minute)
	admitCommit(t, c, calLease("b", 2, calBronze, 0, 10), calT0)
	before := c.Allocations()
	d, err := c.Admit(calLease("x", 2, calGold, 2, 1), calAt(1))
	if err != nil || len(d.Preempt) != 1 {
		t.Fatalf("admit: %v %+v", err, d)
	}
	d.Preempt[0].GPUIDs[0] = "mangled"
	before[0].GPUIDs[0] = "mangled"
	avail.Windows[0].EndUnixMs = calAt(1).UnixMilli()
	after := c.Allocations()
	if len(after) != 1 || !after[0].End.Equal(calAt(10)) || after[0].GPUIDs[0] != "0" {
		t.Fatalf("calendar changed: %+v", after)
	}
	if _, err := c.Admit(calLease("y", 1, calBronze, 5, 1), calAt(1)); calCode(err) != AdmissionNoCapacity {
		t.Fatalf("bronze over the bronze lease: %v; want no capacity", err)
	}
	if _, err := c.Admit(calHeld("y", calGold, 20, 1, "0"), calAt(1)); calCode(err) != 0 {
		t.Fatalf("window shrunk through the caller's message: %v", err)
	}
}

// TestCalendarNoOverlapProperty checks that whatever sequence of
// admissions, commits, releases and prunes runs, no two allocations ever
// hold one GPU at one time, preemption respects tiers and notice, and gold
// and silver allocations end only where committed or released.
func TestCalendarNoOverlapProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "gpus")
		c := newCalendarT(t, n, Availability{}, time.Duration(rapid.IntRange(0, 4).Draw(t, "notice"))*15*time.Minute)
		quarters := func(lo, hi int, label string) time.Duration {
			return time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * 15 * time.Minute
		}
		now, ends := calT0, make(map[string]time.Time) // gold and silver ends
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			now = now.Add(quarters(0, 4, "tick"))
			all := c.Allocations()
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op == 0 && len(all) > 0:
				id, at := rapid.SampledFrom(all).Draw(t, "release").ID, now.Add(quarters(0, 16, "at"))
				if c.Release(id, at); at.Before(ends[id]) {
					ends[id] = at
				}
			case op == 1:
				c.Prune(now)
			default:
				r := LeaseRequest{ID: "l" + strconv.Itoa(step), Start: now.Add(quarters(0, 32, "start")), Duration: quarters(1, 32, "dur"),
					Tier: rapid.SampledFrom([]pb.Tier{calGold, calSilver, calBronze}).Draw(t, "tier"), GPUs: rapid.IntRange(1, n).Draw(t, "count")}
				if rapid.Bool().Draw(t, "specific") {
					r.GPUs, r.GPUIDs = 0, rapid.SliceOfNDistinct(rapid.SampledFrom(calSlots(n)), 1, n, rapid.ID[string]).Draw(t, "ids")
				}
				propAdmit(t, c, r, now, ends)
			}
			checkNoOverlap(t, c, ends)
		}
	})
}

// propAdmit admits r and, if it fits, commits it at once, which must work.
func propAdmit(t *rapid.T, c *Calendar, r LeaseRequest, now time.Time, ends map[string]time.Time) {
	d, err := c.Admit(r, now)
	if err != nil {
		if calCode(err) != AdmissionNoCapacity {
			t.Fatalf("admit %+v: %v", r, err)
		}
		return
	}
	for _, p := range d.Preempt {
		if r.Tier == calBronze || p.NoticeEnds.Before(now.Add(c.notice)) {
			t.Fatalf("%v preempts %s with too little notice: %+v", r.Tier, p.AllocationID, d)
		}
	}
	a, err := c.Commit(r, d, now)
	if err != nil {
		t.Fatalf("commit right after admit: %v", err)
	}
	if a.Tier != calBronze {
		ends[a.ID] = a.End
	}
}

func checkNoOverlap(t *rapid.T, c *Calendar, ends map[string]time.Time) {
	all := c.Allocations()
	for i, a := range all {
		if e, ok := ends[a.ID]; !a.End.After(a.Start) || ok && !a.End.Equal(e) {
			t.Fatalf("allocation %+v; gold or silver end %s", a, e)
		}
		for _, b := range all[i+1:] {
			if a.Start.Before(b.End) && b.Start.Before(a.End) && slices.ContainsFunc(a.GPUIDs, func(g string) bool { return slices.Contains(b.GPUIDs, g) }) {
				t.Fatalf("overlap: %+v and %+v", a, b)
			}
		}
	}
}

func TestCalendarRestore(t *testing.T) {
	c := newCalendarT(t, 2, Availability{}, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	a := Allocation{ID: "l1", GPUIDs: []string{c.gpus[0]}, Start: now.Add(-time.Hour), End: now.Add(time.Hour), Tier: pb.Tier_TIER_SILVER, PriceMicros: 1}
	if err := c.Restore(a); err != nil {
		t.Fatalf("restoring a lease that started before now: %v", err)
	}
	if err := c.Restore(a); err == nil {
		t.Error("the same lease restored twice")
	}
	if err := c.Restore(Allocation{ID: "l2", GPUIDs: []string{"no-such-gpu"}, Start: now, End: now.Add(time.Hour)}); err == nil {
		t.Error("a lease on an unknown GPU restored")
	}
	r := LeaseRequest{ID: "l3", GPUs: 2, Start: now, Duration: time.Minute, Tier: pb.Tier_TIER_SILVER, PriceMicros: 1}
	if _, err := c.Admit(r, now); err == nil {
		t.Error("a restored lease's GPU was handed out again")
	}
}

// An allocation extends into free time its windows cover at floors its
// price meets; not over another lease (not even a bronze one), past the
// windows, over a dearer floor, or after it was cut short.
func TestCalendarExtend(t *testing.T) {
	avail := Availability{Windows: []*pb.Interval{calOneOff(0, 10, 0), calOneOff(10, 12, 5000)}}
	c := newCalendarT(t, 2, avail, time.Hour)
	admitCommit(t, c, calHeld("x", calSilver, 0, 2, "0"), calT0)
	admitCommit(t, c, calHeld("b", calBronze, 5, 1, "0"), calT0)
	admitCommit(t, c, calHeld("y", calSilver, 0, 2, "1"), calT0)
	for _, tc := range []struct {
		id   string
		to   float64
		code AdmissionCode
	}{
		{"x", 4, 0},
		{"x", 5.5, AdmissionNoCapacity}, // bronze b holds GPU 0 from 5
		{"x", 3, AdmissionBadRequest},   // earlier than its end
		{"y", 11, AdmissionBelowFloor},  // the floor from 10 is 5000
		{"y", 13, AdmissionNotAvailable},
		{"nope", 3, AdmissionBadRequest},
		{"y", 9, 0},
	} {
		err := c.Extend(tc.id, calAt(tc.to))
		if got := calCode(err); got != tc.code || (err != nil && got == 0) {
			t.Errorf("extend %s to hour %v: %v; want code %v", tc.id, tc.to, err, tc.code)
		}
	}
	ends := map[string]time.Time{}
	for _, a := range c.Allocations() {
		ends[a.ID] = a.End
	}
	if !ends["x"].Equal(calAt(4)) || !ends["y"].Equal(calAt(9)) || !ends["b"].Equal(calAt(6)) {
		t.Errorf("ends after extending: %v", ends)
	}
	c.Release("x", calAt(3))
	if err := c.Extend("x", calAt(4.5)); err != nil {
		t.Errorf("extend after a release to hour 3: %v", err)
	}
}
