//go:build unix

package transfer

import (
	"errors"
	"syscall"
)

// processRuns reports whether a process pid runs (or may: one of another
// user's, which a signal may not reach, counts as running).
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
