package node

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/idlegrid/idlegrid/node/config"
)

// keptLines is how many of the last lines of a kept log a failing test
// writes out.
const keptLines = 600

// keptLog holds the debug log of the nodes of one test in memory and, if
// the test fails, writes its last keptLines lines to the test's log: a
// failure that a loaded CI machine shows once in many runs then explains
// itself, and a passing run stays quiet.
type keptLog struct {
	mu    sync.Mutex
	lines []string // a ring of the last keptLines lines
	next  int
	total int
}

func keepLog(t *testing.T) *keptLog {
	k := &keptLog{lines: make([]string, keptLines)}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		n := min(k.total, keptLines)
		var b strings.Builder
		for i := range n {
			b.WriteString(k.lines[(k.next-n+i+keptLines)%keptLines])
		}
		t.Logf("the nodes' debug log, its last %d of %d lines:\n%s", n, k.total, b.String())
	})
	return k
}

// node is the logger of the node called name: debug, pubsub's included
// (but not its every RPC), and libp2p's warnings.
func (k *keptLog) node(name string) *slog.Logger {
	cfg := config.LogConfig{Level: "debug", Subsystems: map[string]string{LogLibp2p: "warn", "pubsub": "debug"}}
	return slog.New(NewLogHandler(keptWriter{k}, cfg)).With("node", name)
}

type keptWriter struct{ k *keptLog }

// Write takes one record: slog writes each with one call.
func (w keptWriter) Write(p []byte) (int, error) {
	line := string(p)
	if strings.Contains(line, "system=pubsub/rpc") {
		return len(p), nil
	}
	w.k.mu.Lock()
	defer w.k.mu.Unlock()
	w.k.lines[w.k.next] = line
	w.k.next = (w.k.next + 1) % keptLines
	w.k.total++
	return len(p), nil
}
