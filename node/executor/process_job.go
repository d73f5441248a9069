package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// processJob is one process group: its first process (the leader, whose
// PID is the group's ID), the copies of its output, and its home.
type processJob struct {
	outcome // Wait
	cmd     *exec.Cmd
	pid     int
	home    string

	// mu guards exited. The group is signalled only while exited is false,
	// that is while the leader is not yet reaped, so its PID (the group's
	// ID) cannot have been reused by an unrelated process.
	mu     sync.Mutex
	exited bool
}

// startProcessJob starts cmd with its stdout and stderr on pipes of their
// own, so the two stay apart, and watches it; forget is called once the
// leader has exited.
func startProcessJob(cmd *exec.Cmd, lease, home string, out Output, forget func(*processJob)) (*processJob, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close() // the children hold their own copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	j := &processJob{outcome: newOutcome(lease), cmd: cmd, pid: cmd.Process.Pid, home: home}
	var copies sync.WaitGroup
	copies.Add(2)
	go copyOutput(&copies, orDiscard(out.Stdout), outR)
	go copyOutput(&copies, orDiscard(out.Stderr), errR)
	go j.watch(&copies, forget, outR, errR)
	return j, nil
}

func copyOutput(wg *sync.WaitGroup, w io.Writer, r *os.File) {
	defer wg.Done()
	defer r.Close()
	_, _ = io.Copy(w, r)
}

// watch waits for the leader to exit, kills what is left of its group,
// reaps the leader and waits for the output to drain.
func (j *processJob) watch(copies *sync.WaitGroup, forget func(*processJob), readers ...*os.File) {
	defer close(j.done)
	waitExited(j.pid)
	j.mu.Lock()
	_ = syscall.Kill(-j.pid, syscall.SIGKILL) // stragglers of a finished job
	_ = j.cmd.Wait()                          // an *exec.ExitError is the exit code, read below
	j.exited = true
	j.mu.Unlock()
	forget(j)

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		for _, r := range readers {
			r.Close()
		}
		<-drained
		j.err = fmt.Errorf("pid %d: output still open %v after exit: a process left the job's group", j.pid, drainTimeout)
	}
	j.code = exitCode(j.cmd.ProcessState)
}

// waitExited blocks until pid has exited, without reaping it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // exited, or an error cmd.Wait will report
		}
	}
}

// exitCode is the process's exit status, or 128+signal if a signal
// killed it, as a shell reports it.
func exitCode(st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// signal sends sig to the job's whole group unless the job is over.
func (j *processJob) signal(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.exited {
		_ = syscall.Kill(-j.pid, sig)
	}
}

// ID returns the leader's process ID.
func (j *processJob) ID() string { return strconv.Itoa(j.pid) }

// Stop sends SIGTERM to the job's group, SIGKILL after grace (at once if
// grace is not positive, or if ctx ends first), waits for the job to end
// and removes its home directory.
func (j *processJob) Stop(ctx context.Context, grace time.Duration) error {
	if grace <= 0 {
		j.signal(syscall.SIGKILL)
	} else {
		j.signal(syscall.SIGTERM)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-j.done:
	case <-timer.C:
		j.signal(syscall.SIGKILL)
		select {
		case <-j.done:
		case <-ctx.Done():
			return fmt.Errorf("lease %s: stop: %w", j.lease, ctx.Err())
		}
	case <-ctx.Done():
		j.signal(syscall.SIGKILL)
		return fmt.Errorf("lease %s: stop: %w", j.lease, ctx.Err())
	}
	if err := os.RemoveAll(j.home); err != nil {
		return fmt.Errorf("lease %s: stop: remove home: %w", j.lease, err)
	}
	return nil
}
