//go:build unix

package p2p_test

import (
	"syscall"
	"time"
)

// lowestCPUPriority makes this process the last the kernel gives CPU to
// (nice 19), where it is allowed to.
func lowestCPUPriority() { syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19) }

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
