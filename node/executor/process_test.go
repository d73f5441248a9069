package executor_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
)

func newProcess(t *testing.T) *executor.Process {
	t.Helper()
	t.Parallel()
	p, err := executor.NewProcess(executor.ProcessBaseDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func shSpec(t *testing.T, script string) executor.Spec {
	return executor.Spec{LeaseID: leaseID(t), Command: []string{"sh", "-c", script}}
}

// firstInt is the first integer on the line of out that starts with key.
func firstInt(t *testing.T, out, key string) int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no %q line in %q", key, out)
	return 0
}

func TestProcessOutputApart(t *testing.T) {
	p := newProcess(t)
	st := start(t, p, shSpec(t, apart))
	checkApart(t, st)
}

func TestProcessExitCode(t *testing.T) {
	p := newProcess(t)
	st := start(t, p, shSpec(t, "exit 3"))
	if code := wait(t, st.job); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
}

// The job sees exactly its base environment, its spec's Env and its GPUs,
// and runs in its own home, which Stop removes.
func TestProcessEnvironment(t *testing.T) {
	p := newProcess(t)
	s := executor.Spec{LeaseID: leaseID(t), Command: []string{"env"}, Env: []string{"FOO=bar baz"}, GPUs: []string{"GPU-a", "GPU-b"}}
	st := start(t, p, s)
	if code := wait(t, st.job); code != 0 {
		t.Fatalf("exit code %d; stderr %q", code, st.stderr.String())
	}
	env := strings.Split(strings.TrimSpace(st.stdout.String()), "\n")
	slices.Sort(env)
	var home string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	want := []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", "FOO=bar baz", "HOME=" + home,
		"NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b", "PATH=" + executor.DefaultProcessPath}
	if !slices.Equal(env, want) {
		t.Errorf("environment\n%q\nwant\n%q", env, want)
	}
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		t.Fatalf("home %q: %v", home, err)
	}
	stop(t, st.job, time.Second)
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("home after Stop: %v, want removed", err)
	}
}

func TestProcessCheck(t *testing.T) {
	p := newProcess(t)
	ctx := context.Background()
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		want    string // "" for no error
	}{
		{"in PATH", []string{"sh", "-c", "true"}, ""},
		{"absolute", []string{"/bin/sh"}, ""},
		{"empty", nil, "empty command"},
		{"missing", []string{"idlegrid-no-such-command"}, `command "idlegrid-no-such-command" not found in PATH`},
		{"relative", []string{"./sh"}, "must be absolute"},
		{"not executable", []string{plain}, "not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(ctx, executor.Spec{Command: tc.command})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("check %q: %v, want %q", tc.command, err, tc.want)
			}
		})
	}
}

// SIGTERM comes first, to the whole group, and a trap may answer it;
// stopping twice is nil.
func TestProcessStopTerm(t *testing.T) {
	p := newProcess(t)
	st := start(t, p, shSpec(t, termTrap))
	st.stdout.WaitFor(t, "ready", testTimeout)
	stop(t, st.job, 5*time.Second)
	if code := wait(t, st.job); code != 7 {
		t.Errorf("exit code %d, want 7 from the TERM trap", code)
	}
	if !strings.Contains(st.stdout.String(), "got TERM") {
		t.Errorf("stdout %q lacks the trap's line", st.stdout.String())
	}
	stop(t, st.job, time.Second)
}

// A group that ignores SIGTERM is killed once grace is over, the
// grandchildren with it.
func TestProcessStopKillsGroupAfterGrace(t *testing.T) {
	p := newProcess(t)
	st := start(t, p, shSpec(t, `trap '' TERM; sh -c 'sleep 300 & echo grandchild $!; wait' & echo ready; while :; do sleep 1; done`))
	st.stdout.WaitFor(t, "ready", testTimeout)
	st.stdout.WaitFor(t, "grandchild", testTimeout)
	grandchild := firstInt(t, st.stdout.String(), "grandchild")
	took := stop(t, st.job, 500*time.Millisecond)
	if code := wait(t, st.job); code != 137 {
		t.Errorf("exit code %d, want 137 (SIGKILL)", code)
	}
	if took < 500*time.Millisecond {
		t.Errorf("stopped in %v, before the grace", took)
	}
	waitGone(t, grandchild)
}

// When the first process exits, what it left running is killed and Wait
// does not hang on the output it still held.
func TestProcessExitKillsStragglers(t *testing.T) {
	p := newProcess(t)
	s := shSpec(t, `sleep 300 & echo straggler $!`)
	st := start(t, p, s)
	if code := wait(t, st.job); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	waitGone(t, firstInt(t, st.stdout.String(), "straggler"))
	if leases, _ := p.Running(context.Background()); slices.Contains(leases, s.LeaseID) {
		t.Errorf("running after exit: %v", leases)
	}
}

func TestProcessRunningAndAdopt(t *testing.T) {
	p := newProcess(t)
	ctx := context.Background()
	s := shSpec(t, termTrap)
	st := start(t, p, s)
	if leases, err := p.Running(ctx); err != nil || !slices.Equal(leases, []string{s.LeaseID}) {
		t.Errorf("running: %v, %v", leases, err)
	}
	if _, err := p.Start(ctx, s, executor.Output{}); err == nil {
		t.Error("second start of a running lease: nil error")
	}
	if _, err := p.Adopt(ctx, s.LeaseID, executor.Offsets{}, executor.Output{}); !errors.Is(err, executor.ErrNotFound) {
		t.Errorf("adopt: %v, want ErrNotFound", err)
	}
	stop(t, st.job, time.Second)
	if leases, _ := p.Running(ctx); len(leases) != 0 {
		t.Errorf("running after stop: %v", leases)
	}
}

// helperEnv makes this test binary act as a provider that starts a job
// and then waits to be killed (see TestProcessDiesWithProvider).
const helperEnv = "IDLEGRID_EXECUTOR_TEST_PROVIDER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperProvider()
		return
	}
	m.Run()
}

// helperProvider starts `sleep 300`, prints its PID and blocks until
// killed or until stdin closes.
func helperProvider() {
	p, err := executor.NewProcess()
	if err == nil {
		var j executor.Job
		j, err = p.Start(context.Background(), executor.Spec{LeaseID: "helper", Command: []string{"sleep", "300"}}, executor.Output{})
		if err == nil {
			os.Stdout.WriteString("job " + j.ID() + "\n")
		}
	}
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		return
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// A provider killed with SIGKILL takes its jobs with it (Pdeathsig).
func TestProcessDiesWithProvider(t *testing.T) {
	t.Parallel()
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		helper.Process.Kill()
		t.Fatalf("helper: %v", err)
	}
	job := firstInt(t, line, "job")
	helper.Process.Kill()
	_ = helper.Wait()
	waitGone(t, job)
}
