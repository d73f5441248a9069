package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// signInOnce follows the sign-in address 'idlegrid ui' printed: the API
// answers with its cookie and a redirect to the dashboard, which then
// loads with the cookie alone.
func signInOnce(t *testing.T, url string) {
	t.Helper()
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := noRedirect.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Fatalf("GET %s: %s, cookies %v", url, r.Status, r.Cookies())
	}
	base, _, _ := strings.Cut(url, "/ui/login")
	req, _ := http.NewRequest(http.MethodGet, base+"/ui/", nil)
	req.AddCookie(r.Cookies()[0])
	page, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("the dashboard with the cookie: %s %s", page.Status, page.Header.Get("Content-Type"))
	}
}

func TestUIPrintsTheDaemonsSignInAddress(t *testing.T) {
	t.Parallel()
	dir := newRepo(t)
	_, stop := runDaemonUntil(t, []string{"daemon", "--repo", dir}, "idlegrid daemon ready")
	defer stop()
	r := runCLI(t, "ui", "--repo", dir, "--open=never", "--json")
	var out struct{ URL, Node string }
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil {
		t.Fatalf("ui --json: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if out.Node != "daemon" || !strings.Contains(out.URL, "/ui/login?token=") {
		t.Fatalf("ui --json: %+v", out)
	}
	signInOnce(t, out.URL)
}

func TestUIStartsALightNodeWithoutADaemon(t *testing.T) {
	t.Parallel()
	dir := newRepo(t, "--profile", "renter")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"ui", "--repo", dir, "--open=never"}, func(string) string { return "" }, &out, &errb)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errb.String(), "serving the dashboard from a light node") {
		select {
		case code := <-done:
			t.Fatalf("ui exited %d before serving:\n%s", code, errb.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no light node serving the dashboard after 30 s:\n%s", errb.String())
		}
	}
	signInOnce(t, strings.TrimSpace(out.String()))
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("ui exited %d after Ctrl-C:\n%s", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ui did not stop within 15 s of Ctrl-C")
	}
}

func TestUIRefusesABadOpenFlag(t *testing.T) {
	r := runCLI(t, "ui", "--repo", t.TempDir(), "--open=sometimes")
	if r.code != 2 || !strings.Contains(r.lastLine(), `--open "sometimes": want auto, always or never`) {
		t.Fatalf("ui --open=sometimes: %d %q", r.code, r.stderr)
	}
}
