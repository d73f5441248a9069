//go:build race

package node

// raceEnabled: this test binary runs under the race detector, which slows
// the node's code several times; timings say nothing of it.
const raceEnabled = true
