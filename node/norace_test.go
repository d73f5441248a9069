//go:build !race

package node

// raceDetector says whether the tests run under the race detector, which
// slows the CPU-bound ones tenfold.
const raceDetector = false
