package executor_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"golang.org/x/sys/unix"
)

// testTimeout bounds every wait of these tests: a guard against a hang,
// not a figure the tests assert. An image load that takes under a second
// idle took over 30 s in the race pass, beside node's containers and
// stress-ng on two cores.
const testTimeout = 2 * time.Minute

// leaseID is unique per call, so reruns never meet a leftover container.
func leaseID(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "test-" + name + "-" + hex.EncodeToString(b[:])
}

// started is a job with the buffers its output goes to.
type started struct {
	job    executor.Job
	stdout *executortest.Buffer
	stderr *executortest.Buffer
}

// start starts s on x and stops the job when the test ends.
func start(t *testing.T, x executor.Executor, s executor.Spec) started {
	t.Helper()
	st := started{stdout: new(executortest.Buffer), stderr: new(executortest.Buffer)}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	j, err := x.Start(ctx, s, executor.Output{Stdout: st.stdout, Stderr: st.stderr})
	if err != nil {
		t.Fatalf("start %v: %v", s.Command, err)
	}
	st.job = j
	t.Cleanup(func() { stop(t, j, 0) })
	return st
}

// wait returns the job's exit code, failing the test on an error.
func wait(t *testing.T, j executor.Job) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	code, err := j.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return code
}

// stop stops j with grace, failing the test on an error, and says how
// long it took.
func stop(t *testing.T, j executor.Job, grace time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	begin := time.Now()
	if err := j.Stop(ctx, grace); err != nil {
		t.Errorf("stop: %v", err)
	}
	return time.Since(begin)
}

// waitGone waits until pid has exited (a pidfd turns readable then, for
// any process, reaped or not).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(10*time.Second/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		}
		if n == 0 {
			t.Fatalf("pid %d still runs after 10s", pid)
		}
		return
	}
}

// termTrap prints ready, then on SIGTERM prints "got TERM" and exits 7.
const termTrap = `trap 'echo got TERM; exit 7' TERM; echo ready; sleep 300 & wait`

// termIgnored prints ready and ignores SIGTERM, it and its children.
const termIgnored = `trap '' TERM; echo ready; while :; do sleep 1; done`

// apart writes to both streams, interleaved, then exits at once.
const apart = `echo out1; echo err1 >&2; echo out2; echo err2 >&2; seq 1 20000`

// checkApart checks that a job running apart exited 0 and that each of
// its streams arrived whole on its own writer.
func checkApart(t *testing.T, st started) {
	t.Helper()
	if code := wait(t, st.job); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr %q", code, st.stderr.String())
	}
	if got, want := st.stdout.String(), wantApart(); got != want {
		t.Errorf("stdout: %d bytes, want %d; starts %.40q", len(got), len(want), got)
	}
	if got := st.stderr.String(); got != "err1\nerr2\n" {
		t.Errorf("stderr = %q, want err1, err2", got)
	}
}

// wantApart is what apart writes to stdout.
func wantApart() string {
	var b strings.Builder
	b.WriteString("out1\nout2\n")
	for i := 1; i <= 20000; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}
