package executor

import (
	"context"
	"fmt"
	"time"
)

// drainTimeout bounds how long a job's output may keep arriving after its
// workload stopped. The stream ends by itself once nothing holds it open
// any more, so this only matters when something is wrong.
const drainTimeout = 10 * time.Second

// outcome is how a job ended, as its watcher goroutine records it: done
// closes once the workload exited and its output drained; code and err are
// written before that and read only after it.
type outcome struct {
	lease string
	done  chan struct{}
	code  int
	err   error
}

func newOutcome(lease string) outcome {
	return outcome{lease: lease, done: make(chan struct{})}
}

// Wait returns the exit code once the workload exited and its output has
// been written to the job's Output.
func (o *outcome) Wait(ctx context.Context) (int, error) {
	select {
	case <-o.done:
		if o.err != nil {
			return o.code, fmt.Errorf("lease %s: %w", o.lease, o.err)
		}
		return o.code, nil
	case <-ctx.Done():
		return -1, fmt.Errorf("lease %s: wait: %w", o.lease, ctx.Err())
	}
}
