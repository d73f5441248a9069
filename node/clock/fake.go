package clock

import (
	"sync"
	"time"
)

// Fake is a Clock whose time runs with the wall clock and jumps ahead on
// Advance. A timer fires when its deadline comes, by the passing of real
// time or by a jump; a ticker that a jump carries over several periods
// ticks once, as a time.Ticker whose reader fell behind does. It is safe
// for concurrent use; one Fake may serve every node of a test, so their
// signed times agree.
type Fake struct {
	mu     sync.Mutex // guards offset and timers; held for no I/O
	offset time.Duration
	timers map[*fakeTimer]struct{}
}

// NewFake returns a Fake at the wall clock's time.
func NewFake() *Fake { return &Fake{timers: make(map[*fakeTimer]struct{})} }

// Advance moves the clock ahead by d and fires every timer and ticker due
// by then.
func (f *Fake) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offset += d
	now := f.nowLocked()
	for t := range f.timers {
		if !t.deadline.After(now) {
			t.fireLocked(now)
		} else {
			t.real.Reset(t.deadline.Sub(now))
		}
	}
}

func (f *Fake) nowLocked() time.Time { return time.Now().Add(f.offset) }

// Now returns the wall clock's time plus every Advance so far.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nowLocked()
}

// Since is Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Until is t.Sub(Now()).
func (f *Fake) Until(t time.Time) time.Duration { return t.Sub(f.Now()) }

// After returns the channel of a timer of d.
func (f *Fake) After(d time.Duration) <-chan time.Time { return f.NewTimer(d).C() }

// NewTimer returns a timer that fires once, d from now.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.start(d, 0) }

// NewTicker returns a ticker of period d; d must be positive.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.start(d, d)}
}

func (f *Fake) start(d, period time.Duration) *fakeTimer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: period}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.deadline = f.nowLocked().Add(d)
	f.timers[t] = struct{}{}
	t.real = time.AfterFunc(max(d, 0), t.fire)
	return t
}

// fakeTimer is a Timer or, with a period, a Ticker of a Fake. Its fields
// but c and f are guarded by f.mu.
type fakeTimer struct {
	f        *Fake
	c        chan time.Time
	period   time.Duration // 0 for a timer
	deadline time.Time
	real     *time.Timer // fires at the real moment the deadline comes
}

// fire runs when real time reaches the deadline as it was when the real
// timer was set; a Reset or Advance since may have moved it.
func (t *fakeTimer) fire() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if _, live := t.f.timers[t]; !live {
		return
	}
	if now := t.f.nowLocked(); !t.deadline.After(now) {
		t.fireLocked(now)
	}
}

// fireLocked delivers a tick (dropped when the last is still unread, as
// time's tickers do) and re-arms a ticker or retires a timer.
func (t *fakeTimer) fireLocked(now time.Time) {
	select {
	case t.c <- now:
	default:
	}
	if t.period == 0 {
		delete(t.f.timers, t)
		t.real.Stop()
		return
	}
	t.deadline = t.deadline.Add(t.period)
	if !t.deadline.After(now) {
		t.deadline = now.Add(t.period)
	}
	t.real.Reset(t.deadline.Sub(now))
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Stop stops the timer and reports whether it was still to fire. As with
// time.Timer since Go 1.23, no stale tick is left in C.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, live := t.f.timers[t]
	delete(t.f.timers, t)
	t.real.Stop()
	t.drainLocked()
	return live
}

// Reset makes the timer fire d from now (a ticker: every d from now).
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, live := t.f.timers[t]
	t.drainLocked()
	if t.period != 0 {
		t.period = d
	}
	t.deadline = t.f.nowLocked().Add(d)
	t.f.timers[t] = struct{}{}
	t.real.Reset(max(d, 0))
	return live
}

func (t *fakeTimer) drainLocked() {
	select {
	case <-t.c:
	default:
	}
}

// fakeTicker adapts a fakeTimer to Ticker, whose Stop and Reset return
// nothing.
type fakeTicker struct{ *fakeTimer }

func (t fakeTicker) Stop()                 { t.fakeTimer.Stop() }
func (t fakeTicker) Reset(d time.Duration) { t.fakeTimer.Reset(d) }
