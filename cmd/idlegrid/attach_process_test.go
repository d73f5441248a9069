package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/views"
)

// numbered is a job's output of n numbered lines, as `seq` would print
// them after prefix.
func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s %d\n", prefix, i)
	}
	return b.String()
}

// engineLog is what the engine logged of the provider's container for
// lease id so far: its stdout.
func engineLog(t *testing.T, docker *client.Client, peerID, id string) string {
	t.Helper()
	ctx := context.Background()
	list, err := docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", jobLabel(peerID)+".lease="+id))})
	if err != nil || len(list) != 1 {
		t.Fatalf("containers of lease %s: %d, %v", id, len(list), err)
	}
	rc, err := docker.ContainerLogs(ctx, list[0].ID, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &bytes.Buffer{}, rc)
	return out.String()
}

// restartableProvider starts a provider daemon listening on transport
// alone ("tcp" or "quic-v1", so every stream runs over it), on a port it
// keeps across restarts (see fixedPort), with config set before the
// start; it returns its repository, daemon, ID and multiaddr.
func restartableProvider(t *testing.T, bin string, docker *client.Client, transport string, config ...[2]string) (repo string, d *daemon, id daemonID, addr string) {
	t.Helper()
	port := fixedPort(t)
	listen := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)
	if transport == "quic-v1" {
		listen = fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", port)
	}
	repo = providerRepo(t, bin, listen)
	for _, kv := range config {
		setConfig(t, repo, kv[0], kv[1])
	}
	d = startDaemon(t, bin, repo)
	id = waitUp(t, bin, d)
	removeJobContainers(t, docker, id.PeerID)
	return repo, d, id, listen + "/p2p/" + id.PeerID
}

// listenOn is a loopback listen address of transport ("tcp" or
// "quic-v1") on any free port.
func listenOn(transport string) string {
	if transport == "quic-v1" {
		return "/ip4/127.0.0.1/udp/0/quic-v1"
	}
	return "/ip4/127.0.0.1/tcp/0"
}

// overTransports runs test over TCP and over QUIC, side by side: a
// stream that works on one may fail on the other (a close QUIC cancels).
func overTransports(t *testing.T, test func(t *testing.T, transport string)) {
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			test(t, transport)
		})
	}
}

// attachProc starts `idlegrid attach` as a child process.
func attachProc(t *testing.T, bin, repo, id string) *rentProc {
	t.Helper()
	return startProc(t, repo, exec.Command(bin, "attach", id, "--repo", repo))
}

// A renter detaches from a long job (rent --detach prints the lease ID
// alone and exits 0), attaches and detaches again with Ctrl-C, while the
// provider is SIGKILLed, the job writes on, and the provider restarts and
// adopts it; attached again, the renter follows it to its end. Its kept
// output is the job's whole output, no line lost or repeated, each
// attach's output follows the last one's, and the lease ends with the
// job's exit code and a receipt both signed. A job that ends while its
// renter is away leaves its output, its packed outputs and its receipt
// for the next attach, which downloads them.
func TestDetachAndAttachAcrossAProviderKill(t *testing.T) {
	overTransports(t, detachAndAttachAcrossAProviderKill)
}

func detachAndAttachAcrossAProviderKill(t *testing.T, transport string) {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	bin := buildBinary(t)
	prov, d, pid, addr := restartableProvider(t, bin, docker, transport)
	renter := renterRepo(t, bin, "renter", "--bootstrap", addr)

	const lines = 150 // 20 a second: about 7.5 s
	job := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "line $i"; echo "err $i" >&2; sleep 0.05; done; exit 3`, lines)
	detach := exec.Command(bin, "rent", "--detach", "--repo", renter, "--bootstrap", addr, "--gpu", "H100", "--hours", "1",
		"--max-price", "5", "--gather", "5s", "--image", image, "--", "sh", "-c", job)
	var idOut, detachErr bytes.Buffer
	detach.Stdout, detach.Stderr = &idOut, &detachErr
	if err := detach.Run(); err != nil {
		t.Fatalf("rent --detach: %v\n%s", err, detachErr.String())
	}
	id := strings.TrimSpace(idOut.String())
	if !strings.HasPrefix(id, "lease-") || strings.Contains(id, "\n") {
		t.Fatalf("rent --detach printed %q on stdout, want the lease ID alone\n%s", idOut.String(), detachErr.String())
	}

	// Attached a while, then Ctrl-C: detached again, exit 0, the job runs on.
	first := attachProc(t, bin, renter, id)
	if !poll(30*time.Second, 20*time.Millisecond, func() bool { return strings.Contains(first.stdout.String(), "line 20\n") }) {
		t.Fatalf("attach printed no line 20 within 30s:\n%s\n%s", first.stdout, first.stderr)
	}
	first.cmd.Process.Signal(os.Interrupt)
	if code := first.wait(t, 30*time.Second); code != 0 || !strings.Contains(first.stderr.String(), "detached from lease "+id) {
		t.Fatalf("attach after Ctrl-C: exit %d, want 0 and a detached line\n%s", code, first.stderr)
	}
	if strings.Contains(first.stderr.String(), "lost the job stream") {
		t.Errorf("an attach that lost nothing said it lost the job stream:\n%s", first.stderr)
	}

	// The provider is killed; the job writes on while it is down.
	seen := strings.Count(engineLog(t, docker, pid.PeerID, id), "\n")
	d.cmd.Process.Kill()
	<-d.done
	if !poll(30*time.Second, 50*time.Millisecond, func() bool {
		return strings.Count(engineLog(t, docker, pid.PeerID, id), "\n") >= seen+20
	}) {
		t.Fatal("the job wrote no 20 lines while its provider was down")
	}
	d = startDaemon(t, bin, prov)
	waitUp(t, bin, d)

	second := attachProc(t, bin, renter, id)
	if code := second.wait(t, 60*time.Second); code != 3 {
		t.Fatalf("attach to the end: exit %d, want the job's 3\n%s", code, second.stderr)
	}
	if !strings.Contains(second.stderr.String(), "exit code 3, signed by renter and provider") {
		t.Errorf("attach to the end printed no receipt signed by both:\n%s", second.stderr)
	}
	if !strings.HasSuffix(second.stdout.String(), fmt.Sprintf("line %d\n", lines)) || strings.Contains(second.stdout.String(), "line 20\n") {
		t.Errorf("the second attach's output does not go on from the first's (%d bytes):\n%.200s", len(first.stdout.String()), second.stdout)
	}
	if got := cli(t, bin, "logs", id, "--stream", "stdout", "--repo", renter); got != numbered("line", lines) {
		t.Errorf("kept stdout is not the job's %d lines, each once:\n%s", lines, got)
	}
	if got, _ := readJSON[[]api.LeaseView](bin, "leases", "--json", "--repo", prov); len(got) != 1 || got[0].State != views.LeaseCompleted {
		t.Errorf("provider's leases: %+v", got)
	}
	errs, err := exec.Command(bin, "logs", id, "--stream", "stderr", "--repo", renter).CombinedOutput()
	if err != nil || string(errs) != numbered("err", lines) {
		t.Errorf("kept stderr is not the job's %d lines, each once (%v):\n%s", lines, err, errs)
	}

	// A job that ends while its renter is away.
	results := filepath.Join(t.TempDir(), "results")
	short := exec.Command(bin, "rent", "--detach", "--repo", renter, "--bootstrap", addr, "--gpu", "H100", "--hours", "1",
		"--max-price", "5", "--gather", "5s", "--image", image, "--download", "/workspace/out:"+results,
		"--", "sh", "-c", "echo a; sleep 1; echo b; echo c >&2; mkdir /workspace/out && echo kept > /workspace/out/r")
	out, err := short.Output()
	if err != nil {
		t.Fatalf("rent --detach: %v", err)
	}
	id2 := strings.TrimSpace(string(out))
	if !poll(30*time.Second, 100*time.Millisecond, func() bool {
		ls, _ := readJSON[[]api.LeaseView](bin, "leases", "--json", "--repo", prov)
		for _, l := range ls {
			if l.ID == id2 && node.LeaseEnded(l.State) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("lease %s did not end at the provider within 30s with its renter away", id2)
	}
	third := attachProc(t, bin, renter, id2)
	if code := third.wait(t, 30*time.Second); code != 0 || !strings.Contains(third.stderr.String(), "signed by renter and provider") {
		t.Errorf("attach to an ended lease: exit %d, want 0 and the receipt signed by both\n%s", code, third.stderr)
	}
	if got := cli(t, bin, "logs", id2, "--repo", renter); got != "a\nb\n" {
		t.Errorf("kept stdout of the lease that ended while away: %q, want \"a\\nb\\n\"", got)
	}
	if b, err := os.ReadFile(filepath.Join(results, "r")); string(b) != "kept\n" {
		t.Errorf("the attach did not download the detached lease's output: %q, %v\n%s", b, err, third.stderr)
	}
	d.stop(t)
}

// rent --upload puts a folder in the container before the job starts:
// the job reads it at once, byte for byte (its SHA-256 as sha256sum sees
// it in the container); rent --download brings what the job wrote back
// once it ended. A folder over the provider's jobs.max_upload_mib is
// refused before any lease, and rent says why.
func TestRentUploadsAndDownloadsData(t *testing.T) {
	overTransports(t, rentUploadsAndDownloadsData)
}

func rentUploadsAndDownloadsData(t *testing.T, transport string) {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	bin := buildBinary(t)
	_, d, _, addr := restartableProvider(t, bin, docker, transport, [2]string{"jobs.max_upload_mib", "2"})
	renter := renterRepo(t, bin, "renter", "--bootstrap", addr)
	data := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(filepath.Join(data, "sub"), 0o755)
	blob := make([]byte, 1<<20)
	rand.New(rand.NewSource(3)).Read(blob)
	os.WriteFile(filepath.Join(data, "sub", "blob"), blob, 0o644)
	os.WriteFile(filepath.Join(data, "hello.txt"), []byte("hello\n"), 0o644)
	sum := sha256.Sum256(blob)

	results := filepath.Join(t.TempDir(), "results")
	cmd := exec.Command(bin, "rent", "--repo", renter, "--gpu", "H100", "--hours", "1", "--max-price", "5", "--gather", "5s",
		"--image", image, "--upload", data+":/workspace/in", "--download", "/workspace/out:"+results,
		"--", "sh", "-c", "cat /workspace/in/hello.txt; sha256sum /workspace/in/sub/blob; mkdir -p /workspace/out/deep && cp /workspace/in/sub/blob /workspace/out/deep/copy && echo made > /workspace/out/note")
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("rent --upload: %v\n%s", err, errs.String())
	}
	if want := fmt.Sprintf("hello\n%x  /workspace/in/sub/blob\n", sum); out.String() != want {
		t.Errorf("the job saw %q, want %q", out.String(), want)
	}
	if !strings.Contains(errs.String(), "uploaded /workspace/in") || !strings.Contains(errs.String(), "not billed") {
		t.Errorf("rent said nothing of the upload:\n%s", errs.String())
	}
	// The outputs came back whole, after the container went.
	if b, _ := os.ReadFile(filepath.Join(results, "deep", "copy")); !bytes.Equal(b, blob) {
		t.Errorf("downloaded deep/copy: %d bytes, want the %d-byte blob\n%s", len(b), len(blob), errs.String())
	}
	if b, _ := os.ReadFile(filepath.Join(results, "note")); string(b) != "made\n" {
		t.Errorf("downloaded note: %q", b)
	}
	if !strings.Contains(errs.String(), "downloaded /workspace/out to "+results) {
		t.Errorf("rent said nothing of the download:\n%s", errs.String())
	}

	big := filepath.Join(t.TempDir(), "big")
	os.WriteFile(big, make([]byte, 3<<20), 0o644)
	tooBig := exec.Command(bin, "rent", "--repo", renter, "--gpu", "H100", "--hours", "1", "--max-price", "5", "--gather", "5s",
		"--image", image, "--upload", big+":/workspace/big", "--", "true")
	got, err := tooBig.CombinedOutput()
	if code := exitCode(err); code != exitNoProvider || !strings.Contains(string(got), "jobs.max_upload_mib") {
		t.Errorf("an upload over the provider's bound: exit %d, want %d and the bound named\n%s", code, exitNoProvider, got)
	}
	out2, err := exec.Command(bin, "rent", "--repo", renter, "--image", image, "--upload", data+":/etc/x", "--", "true").CombinedOutput()
	if code := exitCode(err); code != exitUsage || !strings.Contains(string(out2), "--upload") {
		t.Errorf("--upload outside /workspace: exit %d, want %d\n%s", code, exitUsage, out2)
	}
	d.stop(t)
}

// An upload cut off by a killed rent resumes where the provider's copy
// ends: the next rent of the same data sends only the rest (it says from
// which byte), and the job reads the data whole.
func TestAKilledRentsUploadResumes(t *testing.T) {
	overTransports(t, aKilledRentsUploadResumes)
}

func aKilledRentsUploadResumes(t *testing.T, transport string) {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	bin := buildBinary(t)
	prov, d, _, addr := restartableProvider(t, bin, docker, transport, [2]string{"jobs.max_upload_mib", "128"}, [2]string{"jobs.workspace_mib", "256"})
	renter := renterRepo(t, bin, "renter", "--bootstrap", addr)
	data := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(data, 0o755)
	f, err := os.Create(filepath.Join(data, "blob"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	io.CopyN(io.MultiWriter(f, h), rand.New(rand.NewSource(5)), 96<<20)
	f.Close()
	// The second rent, the killed one's peer, gathers for 5 s as the first
	// did: over QUIC the provider sees it join the offers topic only once
	// the killed one's connection is known dead, and it then asks for the
	// provider's book itself (Renter.askBooks).
	rent := func(gather string) *exec.Cmd {
		return exec.Command(bin, "rent", "--repo", renter, "--gpu", "H100", "--hours", "1", "--max-price", "5", "--gather", gather,
			"--image", image, "--upload", data+":/workspace/in", "--", "sha256sum", "/workspace/in/blob")
	}
	first := startProc(t, renter, rent("5s"))
	var part string
	if !poll(60*time.Second, 2*time.Millisecond, func() bool {
		parts, _ := filepath.Glob(filepath.Join(prov, "staging", "*", "*.part"))
		if len(parts) == 1 {
			if fi, err := os.Stat(parts[0]); err == nil && fi.Size() > 4<<20 {
				part = parts[0]
				return true
			}
		}
		return isDone(first)
	}) || part == "" {
		t.Fatalf("no part of the upload at the provider within 60s (rent done: %v)\n%s", isDone(first), first.stderr)
	}
	first.cmd.Process.Kill()
	<-first.done
	// The killed rent's tar of the upload, which it could not remove.
	left := filepath.Join(os.TempDir(), fmt.Sprintf("idlegrid-upload-%d-*.tar", first.cmd.Process.Pid))
	if tars, _ := filepath.Glob(left); len(tars) != 1 {
		t.Errorf("the killed rent left %d tars of its upload (%s), want its one", len(tars), left)
	}

	second := startProc(t, renter, rent("5s"))
	if code := second.wait(t, 120*time.Second); code != 0 {
		t.Fatalf("the second rent: exit %d\n%s", code, second.stderr)
	}
	if tars, _ := filepath.Glob(left); len(tars) != 0 {
		t.Errorf("the next rent left the killed one's tar: %v", tars)
	}
	m := regexp.MustCompile(`uploaded /workspace/in \(.*, from byte (\d+)\)`).FindStringSubmatch(second.stderr.String())
	if m == nil || m[1] == "0" {
		t.Errorf("the second rent did not resume the upload:\n%s", second.stderr)
	}
	if want := fmt.Sprintf("%x  /workspace/in/blob\n", h.Sum(nil)); second.stdout.String() != want {
		t.Errorf("the job read %q, want %q", second.stdout.String(), want)
	}
	d.stop(t)
}

// oneStory is a provider daemon and a renter repository bootstrapped
// from it, with a one-shot rent of a long job whose first line arrived.
type oneStory struct {
	bin, prov, renter string
	d                 *daemon
	rent              *rentProc
}

func newOneStory(t *testing.T, transport string) *oneStory {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	o := &oneStory{bin: buildBinary(t)}
	var addr string
	o.prov, o.d, _, addr = restartableProvider(t, o.bin, docker, transport)
	o.renter = renterRepo(t, o.bin, "renter", "--bootstrap", addr)
	o.rent = startRent(t, o.bin, o.renter, addr, rental{image, "1", 1}, "sh", "-c", "echo up; sleep 600")
	waitOutput(t, o.rent, "up\n", 30*time.Second)
	return o
}

// providerEnded waits until the provider has ended its one lease.
func (o *oneStory) providerEnded(t *testing.T, why string) {
	t.Helper()
	if !poll(60*time.Second, 100*time.Millisecond, func() bool {
		ls := mustJSON[[]api.LeaseView](t, o.bin, "leases", "--json", "--repo", o.prov)
		return len(ls) == 1 && ls[0].Ended
	}) {
		t.Fatalf("the provider did not end the lease %s:\n%s", why, o.d.stderr)
	}
}

// agree fails unless renter and provider each keep one receipt, signed
// by both, saying the same.
func (o *oneStory) agree(t *testing.T) {
	t.Helper()
	var receipts [2][]api.ReceiptView
	for i, repo := range []string{o.renter, o.prov} {
		// The provider keeps the countersignature once the renter's
		// reply reaches it, a moment after the renter kept it.
		signed := func() bool {
			receipts[i] = mustJSON[[]api.ReceiptView](t, o.bin, "receipts", "--json", "--repo", repo)
			return len(receipts[i]) == 1 && len(receipts[i][0].SignedBy) == 2
		}
		if !poll(10*time.Second, 50*time.Millisecond, signed) {
			t.Fatalf("receipts in %s: %+v; want one, signed by both", repo, receipts[i])
		}
	}
	if a, b := receipts[0][0], receipts[1][0]; a.LeaseID != b.LeaseID || a.MeteredSeconds != b.MeteredSeconds || a.Amount != b.Amount || a.Outcome != b.Outcome {
		t.Errorf("the two sides' receipts differ:\nrenter   %+v\nprovider %+v", a, b)
	}
}

// A provider down for longer than rent's re-attach window: the one-shot
// rent gives up, keeps a receipt of its own and exits, leaving the lease
// settling; the provider restarts, adopts the container and, its renter
// gone, ends the lease with a receipt of its own. The next command that
// shows the renter's leases settles the lease with the provider first:
// both sides then keep the same receipt, signed by both.
func TestAProviderOutageAfterRentGaveUpEndsInOneStory(t *testing.T) {
	overTransports(t, aProviderOutageAfterRentGaveUpEndsInOneStory)
}

func aProviderOutageAfterRentGaveUpEndsInOneStory(t *testing.T, transport string) {
	o := newOneStory(t, transport)
	o.d.cmd.Process.Kill()
	<-o.d.done
	if code := o.rent.wait(t, 60*time.Second); !strings.Contains(o.rent.stderr.String(), "the provider is gone") {
		t.Fatalf("rent with its provider down: exit %d, want it to give up\n%s", code, o.rent.stderr)
	}
	o.d = startDaemon(t, o.bin, o.prov)
	waitUp(t, o.bin, o.d)
	o.providerEnded(t, "it adopted, its renter away")

	cmd := exec.Command(o.bin, "leases", "--json", "--repo", o.renter)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ls []api.LeaseView
	if err != nil || json.Unmarshal(out, &ls) != nil || len(ls) != 1 || !ls[0].Ended || !strings.Contains(stderr.String(), "settling 1 lease with its provider") {
		t.Fatalf("the renter's leases once its provider is back: %v\n%s\n%s", err, out, stderr.String())
	}
	o.agree(t)
	o.d.stop(t)
}

// A rent SIGKILLed while its job runs leaves the lease open in its
// repository; its provider, the renter gone for jobs.renter_grace, ends
// it with a receipt of its own. The next command that shows the renter's
// leases closes the lease with the provider first: both then keep the
// same receipt, signed by both.
func TestAKilledRentsLeaseEndsInOneStory(t *testing.T) {
	overTransports(t, aKilledRentsLeaseEndsInOneStory)
}

func aKilledRentsLeaseEndsInOneStory(t *testing.T, transport string) {
	o := newOneStory(t, transport)
	o.rent.cmd.Process.Kill()
	<-o.rent.done
	o.providerEnded(t, "its renter left")
	cmd := exec.Command(o.bin, "leases", "--json", "--repo", o.renter, "--log-level", "info")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ls []api.LeaseView
	if err != nil || json.Unmarshal(out, &ls) != nil || len(ls) != 1 || !ls[0].Ended {
		t.Fatalf("the renter's leases once its provider ended the lease: %v\n%s\n%s\nPROVIDER:\n%s", err, out, stderr.String(), o.d.stderr)
	}
	o.agree(t)
	o.d.stop(t)
}
