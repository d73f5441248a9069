package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/internal/testwatch"
	"github.com/idlegrid/idlegrid/node/api"
)

// binary is cmd/idlegrid as the process tests run it, built by the
// first that asks (a link of the whole daemon takes seconds, and tens on
// a loaded machine) and removed by TestMain.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildBinary compiles cmd/idlegrid once for the process tests.
func buildBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "idlegrid-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.dir, binary.path = dir, filepath.Join(dir, "idlegrid")
		if out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func TestMain(m *testing.M) {
	code := testwatch.Run(m)
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}

// cli runs the binary to completion and returns stdout.
func cli(t testing.TB, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("idlegrid %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// syncBuffer is a bytes.Buffer a child process writes while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// daemon is a running `idlegrid daemon` child process.
type daemon struct {
	repo   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // its exit status, once done is closed
}

func startDaemon(t testing.TB, bin, repo string) *daemon {
	t.Helper()
	d := &daemon{repo: repo, cmd: exec.Command(bin, "daemon", "--repo", repo, "--log-format", "json"), stderr: &syncBuffer{}, done: make(chan struct{})}
	d.cmd.Stderr = d.stderr
	d.cmd.WaitDelay = childPipeWait
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		checkPipesClosed(t, d.err)
	})
	return d
}

// childPipeWait bounds how long a test waits, once a daemon it started
// has exited, for the daemon's stderr to close: a process the daemon
// left behind that holds it would otherwise hold the test up for ever.
const childPipeWait = 10 * time.Second

// checkPipesClosed fails t where a process's Wait gave up on its pipes
// (exec.ErrWaitDelay): something it started outlived it holding them.
func checkPipesClosed(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, exec.ErrWaitDelay) {
		t.Errorf("a process the daemon started outlived it, holding its stderr open %v after it exited", childPipeWait)
	}
}

// waitJSON runs a CLI command until its JSON answer satisfies ok.
func waitJSON[T any](t testing.TB, within time.Duration, what, bin string, ok func(T) bool, args ...string) T {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var v T
		out, err := exec.Command(bin, args...).Output()
		if err == nil && json.Unmarshal(out, &v) == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s (last answer %s)", within, what, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *daemon) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		if d.err != nil {
			t.Errorf("daemon exited with %v after SIGTERM\n%s", d.err, d.stderr)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("daemon took %s to stop, want under 5s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("daemon still running 10s after SIGTERM\n%s", d.stderr)
	}
}

func TestTwoDaemonProcessesPeer(t *testing.T) {
	bin := buildBinary(t)
	dirA := filepath.Join(t.TempDir(), "a")
	dirB := filepath.Join(t.TempDir(), "b")
	cli(t, bin, "init", "--repo", dirA, "--listen-port", "0", "--api-port", "0")
	cli(t, bin, "config", "set", "--repo", dirA, "network.listen", `["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"]`)
	cli(t, bin, "config", "set", "--repo", dirA, "provider.gpus", `[{model="A100", count=4, vram_gib=80, compute_capability="8.0", interconnect="nvlink"}]`)
	cli(t, bin, "config", "set", "--repo", dirA, "provider.price", "1.25")
	cli(t, bin, "config", "set", "--repo", dirA, "provider.country", "DE")
	cli(t, bin, "config", "set", "--repo", dirA, "provider.enabled", "true")
	// wait gives up on a daemon that is not there, saying why...
	if out, err := exec.Command(bin, "wait", "--repo", dirA, "--timeout", "300ms").CombinedOutput(); exitCode(err) != 1 || !strings.Contains(string(out), "not ready after 300ms: no daemon") {
		t.Errorf("wait with no daemon: exit %d, %q; want 1 and not ready", exitCode(err), out)
	}
	a := startDaemon(t, bin, dirA)
	// ...and returns once it serves, as soon as the daemon starts.
	if out, err := exec.Command(bin, "wait", "--repo", dirA, "--timeout", "30s").CombinedOutput(); err != nil {
		t.Fatalf("wait for a daemon starting: %v\n%s", err, out)
	}

	type idOut struct {
		PeerID string   `json:"peer_id"`
		Addrs  []string `json:"addrs"`
		Daemon bool     `json:"daemon"`
	}
	idA := waitJSON(t, 30*time.Second, "daemon A answers id", bin, func(v idOut) bool { return v.Daemon && len(v.Addrs) > 0 }, "id", "--json", "--repo", dirA)

	cli(t, bin, "init", "--repo", dirB, "--listen-port", "0", "--api-port", "0", "--bootstrap", idA.Addrs[0])
	cli(t, bin, "config", "set", "--repo", dirB, "network.listen", `["/ip4/127.0.0.1/tcp/0"]`)
	b := startDaemon(t, bin, dirB)
	if out, err := exec.Command(bin, "wait", "--repo", dirB, "--peers", "1", "--timeout", "30s").CombinedOutput(); err != nil {
		t.Fatalf("wait for B to join A: %v\n%s", err, out)
	}
	idB := waitJSON(t, 30*time.Second, "daemon B answers id", bin, func(v idOut) bool { return v.Daemon }, "id", "--json", "--repo", dirB)

	hasPeer := func(id string) func([]api.Peer) bool {
		return func(ps []api.Peer) bool {
			for _, p := range ps {
				if p.ID == id {
					return true
				}
			}
			return false
		}
	}
	waitJSON(t, 30*time.Second, "A lists B as a peer", bin, hasPeer(idB.PeerID), "peers", "--json", "--repo", dirA)
	waitJSON(t, 30*time.Second, "B lists A as a peer", bin, hasPeer(idA.PeerID), "peers", "--json", "--repo", dirB)
	st := waitJSON(t, 30*time.Second, "B joins A in the offers mesh", bin, func(s api.Status) bool {
		return s.Topics["/idlegrid/public/offers/1"].Mesh == 1
	}, "status", "--json", "--repo", dirB)
	if st.Peers != 1 || st.Swarm != "public" || st.Mode != "server" {
		t.Errorf("B's status: %+v", st)
	}

	// The market through the CLI: B's book holds A's offer, the matcher
	// ranks it, and a gossiped bid comes back with A's signed quote.
	offers := waitJSON(t, 30*time.Second, "B's book holds A's offer", bin, func(o []api.OfferView) bool { return len(o) == 1 },
		"offers", "--json", "--repo", dirB, "--gpu", "A100", "--region", "DE")
	if offers[0].Provider != idA.PeerID || offers[0].Price != "1.25" || offers[0].GPUs[0].Count != 4 || offers[0].Attestable {
		t.Errorf("offer in B's book: %+v", offers[0])
	}
	var match api.MatchResult
	if err := json.Unmarshal([]byte(cli(t, bin, "quote", "--json", "--repo", dirB, "--gpu", "A100", "--count", "2", "--hours", "4")), &match); err != nil {
		t.Fatal(err)
	}
	if len(match.Candidates) != 1 || match.Candidates[0].Total != "10.00" || match.Considered != 1 || match.Feasible != 1 || match.Explained {
		t.Errorf("quote: %+v", match)
	}
	// A quote with matches explains only when asked.
	var explained api.MatchResult
	if err := json.Unmarshal([]byte(cli(t, bin, "quote", "--json", "--explain", "--repo", dirB, "--gpu", "A100", "--count", "2", "--hours", "4")), &explained); err != nil {
		t.Fatal(err)
	}
	if !explained.Explained || explained.Considered != 1 || explained.Feasible != 1 || len(explained.Candidates) != 1 {
		t.Errorf("quote --explain: %+v", explained)
	}
	if out := cli(t, bin, "quote", "--repo", dirB, "--gpu", "H100"); !strings.Contains(out, "nothing fits") || !strings.Contains(out, "1 offers: model not H100") {
		t.Errorf("quote for an absent GPU says:\n%s", out)
	}
	// --json carries the same, structured: counts of the whole book, and
	// each reason with its count.
	var none api.MatchResult
	if err := json.Unmarshal([]byte(cli(t, bin, "quote", "--json", "--repo", dirB, "--gpu", "H100")), &none); err != nil {
		t.Fatal(err)
	}
	if none.Considered != 1 || none.Feasible != 0 || len(none.Reasons) != 1 || none.Reasons[0].Check != "model" || none.Reasons[0].Offers != 1 ||
		len(none.Nearest) != 1 || none.Nearest[0].Model != "A100" || none.Nearest[0].Offers != 1 || none.Nearest[0].From != "1.25" ||
		none.Blocker == nil || none.Blocker.Check != "model" || none.Blocker.Fit != 1 || len(none.Blocker.Cheapest) != 1 || none.Blocker.Cheapest[0].Provider != idA.PeerID {
		t.Errorf("quote --json for an absent GPU: %+v", none)
	}
	// GPUs by any spelling the catalog knows; a typo is refused with the
	// nearest names, and no bid goes out.
	if n := len(waitJSON(t, 10*time.Second, "a100 in lower case", bin, func(o []api.OfferView) bool { return len(o) == 1 }, "offers", "--json", "--repo", dirB, "--gpu", "a100")); n != 1 {
		t.Errorf("offers --gpu a100: %d", n)
	}
	typo := exec.Command(bin, "quote", "--repo", dirB, "--gpu", "A10O")
	var typoErr bytes.Buffer
	typo.Stderr = &typoErr
	if err := typo.Run(); exitCode(err) == 0 || !strings.Contains(typoErr.String(), "did you mean") || !strings.Contains(typoErr.String(), `"A100"`) {
		t.Errorf("quote --gpu A10O: exit %d, %s", exitCode(err), typoErr.String())
	}
	// A query narrows the quote, a query field ranks it; a query that
	// does not parse names its position and the field meant.
	var narrowed api.MatchResult
	if err := json.Unmarshal([]byte(cli(t, bin, "quote", "--json", "--repo", dirB, "--where", "num_gpus>=4 country=de gpu_ram=40..80 price<2", "--sort", "price-")), &narrowed); err != nil {
		t.Fatal(err)
	}
	if len(narrowed.Candidates) != 1 || narrowed.Candidates[0].Offer.Provider != idA.PeerID {
		t.Errorf("quote --where: %+v", narrowed)
	}
	var none5 api.MatchResult
	if err := json.Unmarshal([]byte(cli(t, bin, "quote", "--json", "--repo", dirB, "--where", "num_gpus>=5")), &none5); err != nil {
		t.Fatal(err)
	}
	if len(none5.Candidates) != 0 || none5.Blocker == nil || none5.Blocker.Check != "where" || !strings.Contains(none5.Explanation, "not where num_gpus>=5") {
		t.Errorf("quote --where num_gpus>=5: %+v", none5)
	}
	var listed, unlisted []api.OfferView
	if err := json.Unmarshal([]byte(cli(t, bin, "offers", "--json", "--repo", dirB, "--where", "num_gpus>=4 gpu_ram=40..80")), &listed); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(cli(t, bin, "offers", "--json", "--repo", dirB, "--where", "num_gpus>=5")), &unlisted); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Provider != idA.PeerID || len(unlisted) != 0 {
		t.Errorf("offers --where: %+v, then %+v", listed, unlisted)
	}
	for _, bad := range [][]string{{"quote", "--where", "num_gpus>=4 num_gpu>=2"}, {"quote", "--sort", "colour"}, {"offers", "--where", "num_gpus>=4 num_gpu>=2"}} {
		q := exec.Command(bin, append(bad, "--repo", dirB)...)
		var stderr bytes.Buffer
		q.Stderr = &stderr
		if err := q.Run(); exitCode(err) == 0 || !strings.Contains(stderr.String(), "position 13") && !strings.Contains(stderr.String(), `--sort "colour"`) {
			t.Errorf("%q: exit %d, %s", bad, exitCode(err), stderr.String())
		}
	}
	var bid api.BidResult
	if err := json.Unmarshal([]byte(cli(t, bin, "bid", "--json", "--repo", dirB, "--gpu", "A100", "--count", "2", "--hours", "1", "--wait", "2s")), &bid); err != nil {
		t.Fatal(err)
	}
	if len(bid.Quotes) != 1 || bid.Quotes[0].Provider != idA.PeerID || bid.Quotes[0].Total != "2.50" {
		t.Errorf("bid: %+v", bid)
	}

	// A lists its GPUs by hand: it has no attestation to show, and rent
	// passes it by, saying so and how to lease from it anyway.
	rent := exec.Command(bin, "rent", "--bootstrap", idA.Addrs[0], "--gpu", "A100", "--hours", "1", "--max-price", "5", "--gather", "5s",
		"--image", "idlegrid-test/busybox:1", "--", "true")
	rent.Env = append(os.Environ(), "IDLEGRID_PATH="+filepath.Join(t.TempDir(), "none"))
	out, err := rent.CombinedOutput()
	if exitCode(err) != exitNoProvider || !strings.Contains(string(out), "not attestable (GPUs listed by hand") || !strings.Contains(string(out), "rent --no-attest leases from such providers") {
		t.Errorf("rent from a provider with GPUs listed by hand: exit %d; want %d and a hint at --no-attest\n%s", exitCode(err), exitNoProvider, out)
	}

	// SIGHUP: A's new price reaches B's book; a file that does not parse
	// is refused and A runs on.
	cli(t, bin, "config", "set", "--repo", dirA, "provider.price", "0.99")
	a.cmd.Process.Signal(syscall.SIGHUP)
	waitJSON(t, 30*time.Second, "B's book holds A's offer at the reloaded price", bin, func(o []api.OfferView) bool { return len(o) == 1 && o[0].Price == "0.99" },
		"offers", "--json", "--repo", dirB)
	cfgPath := filepath.Join(dirA, "config.toml")
	good, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, append(slices.Clone(good), "\n[provider\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Signal(syscall.SIGHUP)
	waitJSON(t, 10*time.Second, "A refuses the broken file and answers", bin, func(s api.Status) bool {
		return strings.Contains(a.stderr.String(), "configuration not reloaded")
	}, "status", "--json", "--repo", dirA)
	if err := os.WriteFile(cfgPath, good, 0o600); err != nil {
		t.Fatal(err)
	}

	b.stop(t)
	a.stop(t)
	for _, dir := range []string{dirA, dirB} {
		if _, err := os.Stat(filepath.Join(dir, "api")); !os.IsNotExist(err) {
			t.Errorf("%s: api file left after shutdown", dir)
		}
	}
	if !strings.Contains(a.stderr.String(), `"msg":"node stopped"`) {
		t.Errorf("A's JSON log does not record a clean stop:\n%s", a.stderr)
	}
}
