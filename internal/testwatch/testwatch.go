// Package testwatch says which tests hold a test binary up, in the last
// lines of its output, before go test's -timeout kills it.
//
// go test's timeout prints the tests still running first and then every
// goroutine's stack: in a long package that is thousands of lines, and a
// log that keeps only its end (a CI's) loses the names. Arm, called from a
// TestMain (Run does both), sets a timer a little before the timeout; when it fires it
// writes the stacks of the goroutines that run tests, then one line per
// test naming it and how long it has been blocked, and exits with 2.
package testwatch

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Run parses the flags, arms the watchdog and runs the tests; a TestMain
// ends with os.Exit(testwatch.Run(m)).
func Run(m *testing.M) int {
	flag.Parse()
	disarm := Arm()
	defer disarm()
	return m.Run()
}

// Margin is how long before the -timeout the watchdog fires: a tenth of
// the timeout, at most a minute.
func Margin(timeout time.Duration) time.Duration {
	return min(timeout/10, time.Minute)
}

// Arm starts the watchdog for the binary's -test.timeout, which must be
// parsed (flag.Parse in TestMain before it); it does nothing without a
// timeout. The returned func disarms it.
func Arm() (disarm func()) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return func() {}
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return func() {}
	}
	timeout, _ := g.Get().(time.Duration)
	if timeout <= 0 {
		return func() {}
	}
	start := time.Now()
	t := time.AfterFunc(timeout-Margin(timeout), func() {
		fmt.Fprintf(os.Stderr, "\ntestwatch: the tests ran %s of their -timeout %s; the goroutines running tests:\n\n", time.Since(start).Round(time.Second), timeout)
		Report(os.Stderr, stacks())
		os.Exit(2)
	})
	return func() { t.Stop() }
}

// stacks are every goroutine's stacks, as the runtime writes them.
func stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

var (
	header   = regexp.MustCompile(`^goroutine \d+ \[([^\]]*)\]:`)
	testFunc = regexp.MustCompile(`\.((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)(?:\.func\d+)*(?:\.\d+)*\(`)
)

// Report writes, of the goroutine dump all, the stacks of the goroutines
// that run a test (a test function under testing.tRunner, not waiting in
// the testing package for subtests or parallel peers), then a line for
// each: the test's name and the goroutine's state. A goroutine of
// tRunner's in code with no test function on its stack (a cleanup a
// helper registered, which runs after the test has returned) is named by
// the function the testing frames called (outerFunc). It returns how many it found; where it found none,
// it writes the whole dump, up to maxDump bytes, so that what holds the
// binary up is still in the log.
func Report(w io.Writer, all []byte) int {
	type running struct {
		test, state string
	}
	var found []running
	for _, g := range bytes.Split(all, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(g)), "\n")
		if len(lines) < 2 || !strings.Contains(string(g), "testing.tRunner(") {
			continue
		}
		m := header.FindStringSubmatch(lines[0])
		if m == nil || strings.HasPrefix(lines[1], "testing.") {
			continue // waiting for its subtests, or for its turn to run
		}
		name := ""
		for _, l := range lines[1:] {
			if tm := testFunc.FindStringSubmatch(l); tm != nil && !strings.HasPrefix(l, "testing.") {
				name = tm[1] // the outermost test function wins
			}
		}
		if name == "" {
			name = "a cleanup or helper, " + outerFunc(lines[1:])
		}
		found = append(found, running{name, m[1]})
		fmt.Fprintf(w, "%s\n\n", strings.Join(lines, "\n"))
	}
	for _, r := range found {
		fmt.Fprintf(w, "testwatch: still running %s [%s]\n", r.test, r.state)
	}
	if len(found) == 0 {
		fmt.Fprintf(w, "%s\n\ntestwatch: no test goroutine found; every goroutine is above\n", all[:min(len(all), maxDump)])
	}
	return len(found)
}

// maxDump bounds the dump Report writes when it finds no test running.
const maxDump = 256 << 10

// outerFunc is the function of a goroutine's stack lines (a function's
// line, then its file's, each frame) nearest the testing package's
// frames under it: the function a test or its cleanup called.
func outerFunc(lines []string) string {
	name := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "testing.") || strings.HasPrefix(l, "created by ") {
			continue
		}
		name = l
		if i := strings.LastIndex(l, "("); i > 0 {
			name = l[:i]
		}
	}
	return name
}
