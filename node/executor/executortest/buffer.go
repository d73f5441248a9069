package executortest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is an io.Writer a job's output can be written to while a test
// reads it and waits for what it expects. The zero value is ready.
type Buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// Write appends p and wakes every WaitFor.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return n, err
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor waits until the output contains substr and fails the test if it
// does not within timeout.
func (b *Buffer) WaitFor(t testing.TB, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		seen := strings.Contains(b.b.String(), substr)
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		if seen {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("output did not contain %q within %v; got %q", substr, timeout, b.String())
		}
	}
}
