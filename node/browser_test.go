package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium (Debian's chromium) a test drives with
// chromedp, collecting every error its pages log.
type browser struct {
	t   testing.TB
	ctx context.Context
	// parent is the browser b was made from by on, which collects the
	// errors; nil for one newBrowser started.
	parent *browser
	mu     sync.Mutex
	// errs are the console errors, uncaught exceptions and failed loads
	// the pages logged (CSP refusals among them).
	errs []string
}

// newBrowser starts Chromium, or skips where it is not installed and the
// run does not ask for it (.ci/run sets IDLEGRID_REQUIRE_BROWSER=1 and
// installs it, so CI never skips).
func newBrowser(t testing.TB) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("IDLEGRID_REQUIRE_BROWSER") != "" {
			t.Fatalf("chromium not found, and IDLEGRID_REQUIRE_BROWSER is set: %v", err)
		}
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(b.event))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b.ctx = ctx
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// on is b for the subtest t: the same browser and page, its failures
// t's.
func (b *browser) on(t testing.TB) *browser { return &browser{t: t, ctx: b.ctx, parent: b.root()} }

func (b *browser) root() *browser {
	if b.parent != nil {
		return b.parent
	}
	return b
}

func (b *browser) event(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		var parts []string
		for _, a := range ev.Args {
			parts = append(parts, string(a.Value)+a.Description)
		}
		msg = "console.error: " + strings.Join(parts, " ")
	case *runtime.EventExceptionThrown:
		msg = "exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			msg += " " + ev.ExceptionDetails.Exception.Description
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level != cdplog.EntryLevelError {
			return
		}
		msg = "log: " + ev.Entry.Text + " " + ev.Entry.URL
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, msg)
}

// errors returns the errors logged since the last call, and forgets them.
func (b *browser) errors() []string {
	r := b.root()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.errs
	r.errs = nil
	return e
}

// do runs actions, failing the test on an error, within d.
func (b *browser) do(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page errors: %q)", what, err, b.errors())
	}
}

// eval evaluates a JavaScript expression into a T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript predicate to hold.
func (b *browser) until(d time.Duration, what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.t.Fatalf("waiting for %s: %v (page errors: %q)", what, err, b.errors())
	}
}

// shot writes a screenshot of the whole page under the test's temp dir,
// or under $IDLEGRID_SCREENSHOTS to keep it past the test, and logs its
// path.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := os.Getenv("IDLEGRID_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot of %s: %s", name, path)
}

// noErrors fails the test if a page logged an error since the last look.
func (b *browser) noErrors(page string) {
	b.t.Helper()
	if errs := b.errors(); len(errs) > 0 {
		b.t.Errorf("the %s page logged errors:\n%s", page, strings.Join(errs, "\n"))
	}
}

// js quotes s as a JavaScript string.
func js(s string) string { return fmt.Sprintf("%q", s) }
