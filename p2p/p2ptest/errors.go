package p2ptest

import "errors"

// Sentinel errors of package p2ptest. Callers test them with errors.Is; the
// wrapped text names the file, row and column at fault.
var (
	// ErrMatrix is returned for a latency matrix file that is not a square
	// matrix of non-negative RTTs in milliseconds with 0 on the diagonal.
	ErrMatrix = errors.New("invalid latency matrix")
)
