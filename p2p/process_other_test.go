//go:build !unix

package p2p_test

import "time"

// lowestCPUPriority is a no-op where there is no nice.
func lowestCPUPriority() {}

// processCPU is 0 where there is no getrusage.
func processCPU() time.Duration { return 0 }
