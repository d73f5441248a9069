package testwatch

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const helperEnv = "TESTWATCH_HELPER"

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func TestReportNamesTheBlockedTestLast(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	var out bytes.Buffer
	n := 0
	go func() {
		<-started
		n = Report(&out, stacks())
		close(release)
	}()
	t.Run("blocked", func(t *testing.T) {
		close(started)
		<-release
	})
	if n != 1 {
		t.Fatalf("found %d running tests; want 1 (the parent waits in t.Run):\n%s", n, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "testwatch: still running TestReportNamesTheBlockedTestLast [") {
		t.Errorf("the last line: %q", last)
	}
	if !strings.Contains(out.String(), "testwatch.TestReportNamesTheBlockedTestLast.func") {
		t.Errorf("the blocked test's stack is missing:\n%s", out.String())
	}
}

func TestReportSaysWhenNoTestRuns(t *testing.T) {
	var out bytes.Buffer
	dump := "goroutine 1 [select]:\nmain.main()\n\t/x/main.go:3 +0x1\n\ngoroutine 7 [chan receive]:\ntesting.(*T).Run(0x1)\n\t/go/testing.go:1 +0x1\nmain.TestX(0x1)\n\t/x/x_test.go:9 +0x1\ntesting.tRunner(0x1, 0x2)\n\t/go/testing.go:2 +0x1\n"
	if n := Report(&out, []byte(dump)); n != 0 || !strings.Contains(out.String(), "no test goroutine found") {
		t.Errorf("found %d in a dump whose only test waits for its subtests:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "main.main()") {
		t.Errorf("with no test found, the dump is not in the report:\n%s", out.String())
	}
}

// A cleanup a helper registered runs on tRunner's goroutine after its
// test has returned, with no test function on the stack: it is named by
// its function.
func TestReportNamesABlockedCleanup(t *testing.T) {
	var out bytes.Buffer
	dump := "goroutine 9 [syscall, 12 minutes]:\nsyscall.Syscall6(0x1)\n\t/go/syscall.go:1 +0x1\nos.(*Process).Wait(0x1)\n\t/go/exec.go:1 +0x1\nmain.startIn.func2()\n\t/x/daemon_test.go:40 +0x1\ntesting.(*common).Cleanup.func1()\n\t/go/testing.go:3 +0x1\ntesting.(*common).runCleanup(0x1)\n\t/go/testing.go:4 +0x1\ntesting.tRunner.func2()\n\t/go/testing.go:5 +0x1\ntesting.tRunner(0x1, 0x2)\n\t/go/testing.go:2 +0x1\n"
	if n := Report(&out, []byte(dump)); n != 1 {
		t.Fatalf("found %d in a dump with a blocked cleanup:\n%s", n, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "testwatch: still running a cleanup or helper, main.startIn.func2 [syscall, 12 minutes]" {
		t.Errorf("the last line: %q", last)
	}
}

// A test binary whose test blocks past its -timeout exits with 2, naming
// the test in its last line, before go test's own timeout would.
func TestArmNamesTheTestThatHoldsTheBinaryUp(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		select {} // held up, till the watchdog fires
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestArmNamesTheTestThatHoldsTheBinaryUp$", "-test.timeout=5s")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("the held-up binary ended with %v; want exit status 2\n%s", err, stderr.String())
	}
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("the watchdog fired after %s, not before the 5 s timeout", took)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "testwatch: still running TestArmNamesTheTestThatHoldsTheBinaryUp [select (no cases)") {
		t.Errorf("the last line: %q\n%s", last, stderr.String())
	}
}

func TestMarginIsATenthAtMostAMinute(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{5 * time.Second, 500 * time.Millisecond},
		{20 * time.Minute, time.Minute},
		{5 * time.Minute, 30 * time.Second},
	} {
		if got := Margin(c.timeout); got != c.want {
			t.Errorf("Margin(%s) = %s; want %s", c.timeout, got, c.want)
		}
	}
}
