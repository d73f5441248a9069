package p2ptest

import (
	"testing"
	"testing/synctest"
)

// Simulate runs f in a testing/synctest bubble: a swarm NewMocknet builds
// inside f runs its real nodes (the host, discovery, gossip, pinger and
// keeper the daemon runs) on a virtual clock that moves only when every
// goroutine of the bubble waits on a timer or a channel. A mocknet link
// delays a write by its latency on that clock, and CPU work takes no
// virtual time, so a delivery time, a ping RTT or a count of bytes per
// minute is the protocol's on the matrix's links, not the scheduler's: it
// comes out the same on an idle machine and on a loaded one, and a
// simulated hour costs only the CPU its work needs.
//
// Inside f: time.Sleep and every timer and context deadline run on the
// bubble's clock, which starts at 2000-01-01 00:00 UTC; a test waits on
// events as always. The swarm's Close (registered with t.Cleanup) runs
// inside the bubble, and the bubble ends only when every goroutine it
// started has returned: a leak fails the test with each goroutine's
// stack.
//
// What cannot run in a bubble: NewLoopback's hosts, whose real sockets
// are not durable waits and so stop the clock while any connection is
// open; channels and timers made outside f (a bubble panics on them); a
// mutex held while its holder waits on the clock.
func Simulate(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}
