package clock

import (
	"sync"
	"testing"
	"time"
)

// within fails unless c delivers before the real deadline d.
func within(t *testing.T, c <-chan time.Time, d time.Duration, what string) time.Time {
	t.Helper()
	select {
	case at := <-c:
		return at
	case <-time.After(d):
		t.Fatalf("%s: nothing after %s", what, d)
	}
	return time.Time{}
}

func quiet(t *testing.T, c <-chan time.Time, what string) {
	t.Helper()
	select {
	case <-c:
		t.Fatalf("%s fired", what)
	default:
	}
}

func TestFakeAdvanceFiresWhatIsDue(t *testing.T) {
	f := NewFake()
	t0 := f.Now()
	hour := f.NewTimer(time.Hour)
	day := f.NewTimer(24 * time.Hour)
	f.Advance(90 * time.Minute)
	at := within(t, hour.C(), time.Second, "the hour timer after 90 min")
	if at.Sub(t0) < 90*time.Minute {
		t.Errorf("fired at %s after start, want at least 90 min", at.Sub(t0))
	}
	quiet(t, day.C(), "the day timer after 90 min")
	if got := f.Since(t0); got < 90*time.Minute || got > 91*time.Minute {
		t.Errorf("Since = %s after Advance(90m)", got)
	}
	if !day.Stop() || day.Stop() {
		t.Error("Stop reports wrongly whether the timer was pending")
	}
	f.Advance(48 * time.Hour)
	quiet(t, day.C(), "a stopped timer")
}

func TestFakeRunsWithTheWallClock(t *testing.T) {
	f := NewFake()
	f.Advance(time.Hour)
	start := time.Now()
	within(t, f.NewTimer(30*time.Millisecond).C(), 5*time.Second, "a 30 ms timer")
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Errorf("a 30 ms timer fired after %s of real time", waited)
	}
	// A timer set before a jump fires at its moved-up deadline.
	long := f.NewTimer(time.Hour + 50*time.Millisecond)
	f.Advance(time.Hour)
	within(t, long.C(), 5*time.Second, "the rest of a timer after a jump")
}

func TestFakeTickerTicksOnceForSeveralPeriodsAndResets(t *testing.T) {
	f := NewFake()
	tk := f.NewTicker(time.Minute)
	f.Advance(10 * time.Minute)
	within(t, tk.C(), time.Second, "the ticker after 10 periods")
	quiet(t, tk.C(), "a second tick for the same jump")
	f.Advance(time.Minute)
	within(t, tk.C(), time.Second, "the ticker's next period")
	tk.Reset(time.Hour)
	f.Advance(30 * time.Minute)
	quiet(t, tk.C(), "a ticker reset to an hour, after 30 min")
	f.Advance(30 * time.Minute)
	within(t, tk.C(), time.Second, "the reset ticker")
	tk.Stop()
	f.Advance(2 * time.Hour)
	quiet(t, tk.C(), "a stopped ticker")
}

func TestFakeResetLeavesNoStaleTick(t *testing.T) {
	f := NewFake()
	tm := f.NewTimer(time.Minute)
	f.Advance(time.Minute) // fired, unread
	if tm.Reset(time.Hour) {
		t.Error("Reset of a fired timer reports it pending")
	}
	quiet(t, tm.C(), "a timer reset after it fired")
	f.Advance(time.Hour)
	within(t, tm.C(), time.Second, "the reset timer")
}

func TestFakeIsSafeForConcurrentUse(t *testing.T) {
	f := NewFake()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 200 {
				tm := f.NewTimer(time.Second)
				f.Now()
				tm.Reset(time.Millisecond)
				tm.Stop()
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				f.Advance(time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

func TestSystemClockTimers(t *testing.T) {
	c := Or(nil)
	within(t, c.After(time.Millisecond), 5*time.Second, "After")
	tk := c.NewTicker(time.Millisecond)
	within(t, tk.C(), 5*time.Second, "a ticker")
	tk.Stop()
	if c.Until(c.Now().Add(time.Hour)) <= 0 {
		t.Error("Until of an hour ahead is not positive")
	}
}
