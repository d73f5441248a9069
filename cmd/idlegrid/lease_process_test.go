package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/views"
)

// daemonID is what `idlegrid id --json` answers.
type daemonID struct {
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"`
	Daemon bool     `json:"daemon"`
}

// providerRepo initialises a provider repository that sells 8 fake H100s,
// runs leases as Docker containers of images present (it pulls none: a
// test never reaches past loopback) and meters them every 200 ms, with
// P2P on listen and the API on a free port.
func providerRepo(t *testing.T, bin, listen string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "provider")
	// As the README's provider quick start has it: a fake DGX H100, which
	// sells from the start, attested, to a renter's defaults.
	cli(t, bin, "init", "--repo", dir, "--profile", "provider", "--gpu-source", "fake:dgxh100", "--listen-port", "0", "--api-port", "0")
	for _, kv := range [][2]string{
		{"network.listen", `["` + listen + `"]`},
		{"provider.min_duration", "1m"},
		{"jobs.executor", "docker"},
		{"jobs.pull", "false"},
		{"jobs.heartbeat_interval", "200ms"},
		{"jobs.stop_grace", "1s"},
		{"jobs.renter_grace", "2s"},
	} {
		setConfig(t, dir, kv[0], kv[1])
	}
	return dir
}

// renterRepo initialises a renter repository, with extra init flags.
func renterRepo(t *testing.T, bin, name string, flags ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	cli(t, bin, append([]string{"init", "--repo", dir, "--profile", "renter"}, flags...)...)
	return dir
}

// waitUp waits until d's API answers `id`, failing the test at once if
// d exits instead.
func waitUp(t *testing.T, bin string, d *daemon) daemonID {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, err := readJSON[daemonID](bin, "id", "--json", "--repo", d.repo)
		if err == nil && id.Daemon {
			return id
		}
		select {
		case <-d.done:
			t.Fatalf("daemon exited while starting: %v\n%s", d.err, d.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not answering after 30s\n%s", d.stderr)
		}
	}
}

// readJSON runs the CLI and decodes the JSON it prints.
func readJSON[T any](bin string, args ...string) (T, error) {
	var v T
	cmd := exec.Command(bin, args...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return v, fmt.Errorf("idlegrid %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("idlegrid %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return v, nil
}

// mustJSON is readJSON that fails the test on an error.
func mustJSON[T any](t *testing.T, bin string, args ...string) T {
	t.Helper()
	v, err := readJSON[T](bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// poll checks cond every interval until it holds (true) or within has
// passed (false); the caller reports what did not happen.
func poll(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every) // poll, under the deadline above
	}
	return true
}

// waitOutput waits until the rent has printed want on its stdout.
func waitOutput(t *testing.T, p *rentProc, want string, within time.Duration) {
	t.Helper()
	printed := func() bool { return strings.Contains(p.stdout.String(), want) }
	if !poll(within, 20*time.Millisecond, func() bool { return printed() || isDone(p) }) || !printed() {
		t.Fatalf("rent printed no %q within %s:\n%s", want, within, p.stderr)
	}
}

// rentProc is an `idlegrid rent` child process.
type rentProc struct {
	repo           string
	round          int
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed once it exited
	err            error         // its exit status, once done is closed
	killed         bool
}

// rental is what a rent asks for: gpus H100s for hours, to run image.
type rental struct {
	image, hours string
	gpus         int
}

// startRent rents from the provider at bootstrap and runs job, as a child
// process.
func startRent(t *testing.T, bin, repo, bootstrap string, r rental, job ...string) *rentProc {
	t.Helper()
	args := append([]string{"rent", "--repo", repo, "--bootstrap", bootstrap, "--gpu", "H100", "--count", strconv.Itoa(r.gpus), "--hours", r.hours,
		"--max-price", "5", "--gather", "5s", "--image", r.image, "--"}, job...)
	return startProc(t, repo, exec.Command(bin, args...))
}

// startProc starts cmd, a client command on repo, as a child process
// killed when the test ends.
func startProc(t *testing.T, repo string, cmd *exec.Cmd) *rentProc {
	t.Helper()
	p := &rentProc{repo: repo, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the rent to exit and returns its exit code.
func (p *rentProc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("rent on %s (round %d) still running after %s\nstdout:\n%s\nstderr:\n%s", p.repo, p.round, within, p.stdout, p.stderr)
	}
	return exitCode(p.err)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// jobLabel is the label prefix of the containers the provider with this
// peer ID runs (node/leasenode.go newExecutor).
func jobLabel(peerID string) string { return "idlegrid-" + peerID[len(peerID)-12:] }

// jobContainers lists the containers the provider with this peer ID left
// on the engine, running or not: lease ID → container states.
func jobContainers(ctx context.Context, docker *client.Client, peerID string) (map[string][]string, error) {
	prefix := jobLabel(peerID)
	list, err := docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", prefix+".managed=1"))})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, c := range list {
		l := c.Labels[prefix+".lease"]
		out[l] = append(out[l], c.State)
	}
	return out, nil
}

// removeJobContainers force-removes, when the test ends, what the
// provider left: a killed provider leaves its containers for adoption.
func removeJobContainers(t *testing.T, docker *client.Client, peerID string) {
	t.Cleanup(func() {
		ctx := context.Background()
		list, err := docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", jobLabel(peerID)+".managed=1"))})
		if err != nil {
			return
		}
		for _, c := range list {
			docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	})
}

// parseAmount reads a ledger or receipt amount, such as "-0.000555", in
// micro-units.
func parseAmount(t *testing.T, s string) int64 {
	t.Helper()
	neg := strings.HasPrefix(s, "-")
	m, err := market.ParsePrice(strings.TrimPrefix(s, "-"))
	if err != nil {
		t.Fatalf("amount %q: %v", s, err)
	}
	if neg {
		return -int64(m)
	}
	return int64(m)
}

// side is one party's repository, role, counterparty and the balance its
// ledger should show with it.
type side struct{ repo, role, peer, balance string }

// assertOneStory asserts that each side's records (through its daemon, or
// read from its repository when none runs) hold the one lease id,
// completed, its receipt for amount both signed, and the ledger balance.
func assertOneStory(t *testing.T, bin, id, amount string, sides []side) {
	t.Helper()
	for _, s := range sides {
		ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", s.repo)
		if len(ls) != 1 || ls[0].ID != id || ls[0].Role != s.role || ls[0].State != views.LeaseCompleted {
			t.Errorf("%s's leases: %+v; want %s completed", s.role, ls, id)
		}
		rs := waitJSON(t, 10*time.Second, s.role+" holds the receipt both signed", bin, func(rs []api.ReceiptView) bool {
			return len(rs) == 1 && len(rs[0].SignedBy) == 2
		}, "receipts", "--json", "--repo", s.repo)
		if rs[0].LeaseID != id || rs[0].Outcome != "completed" || rs[0].Amount != amount || rs[0].ExitCode != 0 {
			t.Errorf("%s's receipt: %+v; want %s completed for %s", s.role, rs[0], id, amount)
		}
		ledger := mustJSON[[]api.LedgerEntry](t, bin, "ledger", "--json", "--repo", s.repo)
		if len(ledger) != 1 || ledger[0].Peer != s.peer || ledger[0].Balance != s.balance || ledger[0].Receipts != 1 {
			t.Errorf("%s's ledger: %+v; want %s for %s", s.role, ledger, s.balance, s.peer)
		}
	}
}

var receiptLine = regexp.MustCompile(`idlegrid: lease (lease-[0-9a-f]+) completed: \d+ s metered, ([0-9.]+) USD, exit code 0, signed by renter and provider\n`)

// TestRentThroughProcesses rents from a provider daemon process with
// `idlegrid rent` as a process, on a real Docker engine, and reads both
// sides' records through the CLI: the renter's from its repository, the
// provider's through its daemon. The provider listens on TCP or QUIC
// alone, so every stream of the rental runs over it.
func TestRentThroughProcesses(t *testing.T) {
	overTransports(t, rentThroughProcesses)
}

func rentThroughProcesses(t *testing.T, transport string) {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	bin := buildBinary(t)
	prov := providerRepo(t, bin, listenOn(transport))
	d := startDaemon(t, bin, prov)
	pid := waitUp(t, bin, d)
	removeJobContainers(t, docker, pid.PeerID)
	renter := renterRepo(t, bin, "renter")
	rid := mustJSON[daemonID](t, bin, "id", "--json", "--repo", renter)

	// The job sleeps past a second, so the receipt meters something.
	start := time.Now()
	r := startRent(t, bin, renter, pid.Addrs[0], rental{image, "1", 1}, "sh", "-c", "echo out; echo err >&2; sleep 1.5")
	if code := r.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("rent exited %d\n%s", code, r.stderr)
	}
	t.Logf("rent took %s", time.Since(start).Round(time.Millisecond))
	stderr := r.stderr.String()
	if got := r.stdout.String(); got != "out\n" {
		t.Errorf("rent's stdout %q, want \"out\\n\"", got)
	}
	m := receiptLine.FindStringSubmatch(stderr)
	if !strings.Contains(stderr, "err\n") || m == nil {
		t.Fatalf("rent's stderr has no \"err\" or no receipt line signed by both:\n%s", stderr)
	}
	id, amount := m[1], m[2]
	if parseAmount(t, amount) == 0 {
		t.Errorf("receipt for %s meters nothing: %s", id, m[0])
	}

	assertOneStory(t, bin, id, amount, []side{
		{renter, "renter", pid.PeerID, "-" + amount},
		{prov, "provider", rid.PeerID, amount},
	})
	if out := cli(t, bin, "logs", id, "--repo", renter); out != "out\n" {
		t.Errorf("idlegrid logs %s: %q", id, out)
	}

	// Ctrl-C: rent cancels the lease at the provider, which stops the job,
	// and still prints the receipt for what ran, signed by both.
	long := startRent(t, bin, renter, pid.Addrs[0], rental{image, "1", 1}, "sh", "-c", "echo up; sleep 300")
	waitOutput(t, long, "up\n", 30*time.Second)
	if err := long.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := long.wait(t, 30*time.Second)
	cancelled := regexp.MustCompile(`idlegrid: lease (lease-[0-9a-f]+) cancelled: \d+ s metered, [0-9.]+ USD, exit code -?\d+, signed by renter and provider\n`).FindStringSubmatch(long.stderr.String())
	if code != exitInterrupted || cancelled == nil {
		t.Fatalf("rent interrupted: exit %d; want %d and a cancelled receipt signed by both:\n%s", code, exitInterrupted, long.stderr)
	}
	for _, repo := range []string{renter, prov} {
		ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", repo)
		if i := slices.IndexFunc(ls, func(l api.LeaseView) bool { return l.ID == cancelled[1] }); i < 0 || ls[i].State != views.LeaseCancelled {
			t.Errorf("%s's leases after the interrupt: %+v", filepath.Base(repo), ls)
		}
	}

	// An image the provider does not have: refused, and rent says so.
	bad := startRent(t, bin, renter, pid.Addrs[0], rental{"idlegrid-test/nothing:1", "1", 1}, "true")
	code = bad.wait(t, 30*time.Second)
	lines := strings.Split(strings.TrimSpace(bad.stderr.String()), "\n")
	if last := lines[len(lines)-1]; code != exitNoProvider || !strings.HasPrefix(last, "idlegrid: ") || !strings.Contains(last, "image idlegrid-test/nothing:1 is not present") {
		t.Errorf("rent of an absent image: exit %d, last line %q; want %d and a line naming the image not present\n%s", code, last, exitNoProvider, bad.stderr)
	}
	for _, repo := range []string{renter, prov} {
		if ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", repo); len(ls) != 2 {
			t.Errorf("a refused lease left records in %s: %+v", repo, ls)
		}
	}

	// rent exits with the job's code, and with its own when nothing fits.
	// (A renter of its own: the provider answers one peer's book syncs at
	// a bounded rate, and this one has just made three rentals.)
	other := renterRepo(t, bin, "other")
	seven := startRent(t, bin, other, pid.Addrs[0], rental{image, "1", 1}, "sh", "-c", "echo out; exit 7")
	code = seven.wait(t, 60*time.Second)
	lines = strings.Split(strings.TrimSpace(seven.stderr.String()), "\n")
	if last := lines[len(lines)-1]; code != 7 || !strings.Contains(last, "the job exited with code 7") || !strings.Contains(seven.stderr.String(), "exit code 7, signed by renter and provider") {
		t.Errorf("a job that exits 7: rent exit %d, last line %q; want 7\n%s", code, last, seven.stderr)
	}
	// --json: stdout is the result alone; the job's output goes to stderr.
	asJSON := exec.Command(bin, "rent", "--json", "--repo", renterRepo(t, bin, "json"), "--bootstrap", pid.Addrs[0], "--gpu", "H100",
		"--hours", "1", "--max-price", "5", "--gather", "5s", "--image", image, "--", "sh", "-c", "echo to-stdout")
	var jsonOut, jsonErr bytes.Buffer
	asJSON.Stdout, asJSON.Stderr = &jsonOut, &jsonErr
	var res api.RentResult
	if err := asJSON.Run(); err != nil || json.Unmarshal(jsonOut.Bytes(), &res) != nil || res.Receipt.LeaseID == "" {
		t.Errorf("rent --json: %v; stdout is not one result:\n%s\nstderr:\n%s", err, jsonOut.String(), jsonErr.String())
	} else if !strings.Contains(jsonErr.String(), "to-stdout\n") {
		t.Errorf("rent --json: the job's output is not on stderr:\n%s", jsonErr.String())
	}
	none := exec.Command(bin, "rent", "--repo", renterRepo(t, bin, "third"), "--bootstrap", pid.Addrs[0], "--gpu", "B200", "--max-price", "5", "--gather", "1s", "--image", image, "--", "true")
	out, err := none.CombinedOutput()
	if code := exitCode(err); code != exitNothingFits || !strings.Contains(string(out), "nothing fits after 1s") {
		t.Errorf("rent of a GPU nobody sells: exit %d; want %d and \"nothing fits\"\n%s", code, exitNothingFits, out)
	}

	if cs, err := jobContainers(context.Background(), docker, pid.PeerID); err != nil || len(cs) != 0 {
		t.Errorf("containers left after the lease ended: %v %v", cs, err)
	}
	d.stop(t)
}
