// Package clock is the time source of a node's components. Every component
// that waits, times out or stamps a time takes a Clock, so tests of
// timeouts (a renter's grace, a re-attach window, a bronze lease's notice)
// jump over the wait instead of sleeping through it.
//
// System is the wall clock. Fake runs with the wall clock and can be moved
// ahead by Advance: the tests here run real libp2p hosts and real
// containers, which keep their own (real) time, so a clock that stood
// still until told would stall them; one that only ever jumps forward
// keeps every component's timers consistent with each other.
//
// clock imports nothing of idlegrid's.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	Until(t time.Time) time.Duration
	// After is NewTimer(d).C(), for a wait that is never stopped.
	After(d time.Duration) <-chan time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// System returns the wall clock.
func System() Clock { return system{} }

type system struct{}

func (system) Now() time.Time                         { return time.Now() }
func (system) Since(t time.Time) time.Duration        { return time.Since(t) }
func (system) Until(t time.Time) time.Duration        { return time.Until(t) }
func (system) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (system) NewTimer(d time.Duration) Timer         { return sysTimer{time.NewTimer(d)} }
func (system) NewTicker(d time.Duration) Ticker       { return sysTicker{time.NewTicker(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time   { return t.t.C }
func (t sysTicker) Stop()                 { t.t.Stop() }
func (t sysTicker) Reset(d time.Duration) { t.t.Reset(d) }

// Or returns c, or the system clock when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return System()
	}
	return c
}
