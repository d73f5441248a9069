// Package fanout runs one call per item at once, all under one deadline.
// It imports only the standard library.
package fanout

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Any runs do for every item of xs in parallel, all within limit, and
// reports whether any returned true. It returns once every call has.
func Any[T any](ctx context.Context, limit time.Duration, xs []T, do func(context.Context, T) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	var any atomic.Bool
	for _, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if do(ctx, x) {
				any.Store(true)
			}
		}()
	}
	wg.Wait()
	return any.Load()
}
