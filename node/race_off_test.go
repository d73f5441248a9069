//go:build !race

package node

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = false
