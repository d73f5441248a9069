package market

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
)

// Fresh keys cannot book a calendar ahead (issue 26, attack 8: 7 fresh
// keys booked all 8 GPUs for each of the next 7 days). Past the near
// horizon the class holds at most lim.GPUs at once and lim.GPUTime in
// all, however many keys it has; within it, and for renters outside the
// class, the calendar alone decides.
func TestFreshKeysHoldAShareOfTheCalendarAheadTogether(t *testing.T) {
	now := calAt(0)
	lim := HoldLimit{Prompt: time.Minute, Near: 2 * time.Hour, GPUs: 4, GPUTime: 96 * time.Hour}
	c := newCalendarT(t, 8, Availability{}, time.Minute)
	fresh := map[string]bool{}
	book := func(id string, gpus int, start, dur float64, isFresh bool) error {
		r := calLease(id, gpus, pb.Tier_TIER_SILVER, start, dur)
		if isFresh {
			if err := c.CheckHolds(r, lim, func(id string) bool { return fresh[id] }, now); err != nil {
				return err
			}
			fresh[id] = true
		}
		d, err := c.Admit(r, now)
		if err == nil {
			_, err = c.Commit(r, d, now)
		}
		return err
	}
	var held []string
	for day := range 7 {
		for _, gpus := range []int{8, 4, 2, 1} {
			id := fmt.Sprintf("squat-%d-%d", day, gpus)
			err := book(id, gpus, float64(day*24)+0.5, 24, true)
			var ae *AdmissionError
			switch {
			case err == nil:
				held = append(held, id)
			case !errors.As(err, &ae) || ae.Code != AdmissionHoldLimit:
				t.Fatalf("%s: %v; want a hold limit", id, err)
			}
		}
	}
	if got := peakHeld(c.sorted(), calAt(2), calAt(8*24)); got > lim.GPUs {
		t.Errorf("fresh keys hold %d GPUs at once past the near horizon (%v); the limit is %d", got, held, lim.GPUs)
	}
	var total time.Duration
	for _, a := range c.sorted() {
		total += heldPast(a.Start, a.End, len(a.GPUIDs), calAt(2))
	}
	if total > lim.GPUTime {
		t.Errorf("fresh keys hold %s of GPU time past the near horizon; the limit is %s", total, lim.GPUTime)
	}
	// A lease that starts now is use, attended throughout: the calendar
	// alone decides, and once started a lease holds nothing ahead. A
	// renter with history books ahead past the pool; a fresh one books no
	// more than the 8 GPU-hours left of it.
	if err := book("fresh-now", 2, 0, 24, true); err != nil {
		t.Errorf("a fresh renter's 2 GPUs from now for a day: %v", err)
	}
	if err := book("fresh-soon", 1, 1, 1, true); err != nil {
		t.Errorf("a fresh renter's GPU for an hour in an hour, within the near horizon: %v", err)
	}
	if err := book("known-ahead", 4, 48, 24, false); err != nil {
		t.Errorf("a known renter's 4 GPUs for day 3: %v", err)
	}
	err := book("fresh-ahead", 1, 72, 10, true)
	if err == nil || !strings.Contains(err.Error(), "renters with no history here hold") {
		t.Errorf("one more fresh hour ahead: %v; want the hold limit", err)
	}
}

// peakHeld counts what is held at one instant, half-open: a lease that
// starts as another ends does not add to it.
func TestPeakHeldIsHalfOpen(t *testing.T) {
	a := &Allocation{ID: "a", GPUIDs: []string{"0", "1"}, Start: calAt(0), End: calAt(2)}
	b := &Allocation{ID: "b", GPUIDs: []string{"2", "3", "4"}, Start: calAt(2), End: calAt(4)}
	c := &Allocation{ID: "c", GPUIDs: []string{"5"}, Start: calAt(1), End: calAt(3)}
	for _, tc := range []struct {
		s, e float64
		want int
	}{{0, 4, 4}, {0, 1, 2}, {0, 2, 3}, {3, 4, 3}, {4, 5, 0}} {
		if got := peakHeld([]*Allocation{a, b, c}, calAt(tc.s), calAt(tc.e)); got != tc.want {
			t.Errorf("[%v, %v): %d; want %d", tc.s, tc.e, got, tc.want)
		}
	}
}
