package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/repo"
)

var (
	acceptedLine   = regexp.MustCompile(`lease (lease-[0-9a-f]+) accepted by`)
	forwardingLine = regexp.MustCompile(`forwarding (127\.0\.0\.1:\d+) to port 8080`)
)

// While rent follows a lease in one process, its renter reaches into the
// container from others: exec with output, exit code, input and a
// terminal, and port-forward to an HTTP server the job runs with no
// network. Another peer is refused both, and so is everyone once the
// lease has ended. The provider listens on one transport, TCP or QUIC,
// so every session runs over it.
func TestSessionsReachIntoALease(t *testing.T) {
	image := executortest.BusyboxImage(t)
	bin := buildBinary(t)
	for transport, listen := range map[string]string{"tcp": "/ip4/127.0.0.1/tcp/0", "quic": "/ip4/127.0.0.1/udp/0/quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			sessionsReachIntoALease(t, bin, image, listen)
		})
	}
}

func sessionsReachIntoALease(t *testing.T, bin, image, listen string) {
	prov := providerRepo(t, bin, listen)
	d := startDaemon(t, bin, prov)
	pid := waitUp(t, bin, d)
	renter := renterRepo(t, bin, "renter")
	r := startRent(t, bin, renter, pid.Addrs[0], rental{image, "1", 1},
		"sh", "-c", "echo hello from the job > /workspace/index.html; echo up; exec httpd -f -p 127.0.0.1:8080 -h /workspace")
	waitOutput(t, r, "up\n", 30*time.Second)
	m := acceptedLine.FindStringSubmatch(r.stderr.String())
	if m == nil {
		t.Fatalf("rent named no lease:\n%s", r.stderr)
	}
	lease := m[1]

	run := func(stdin string, args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), exitCode(err)
	}
	out, errs, code := run("", "exec", "--repo", renter, lease, "--", "sh", "-c", "cat index.html; id -u; exit 5")
	if out != "hello from the job\n65534\n" || code != 5 {
		t.Errorf("exec: exit %d, stdout %q; want 5 and the job's file as the job's user\n%s", code, out, errs)
	}
	// A lease goes by the start of its ID too, as the help writes it.
	if out, errs, code := run("", "exec", "--repo", renter, lease[:12]+"…", "--", "echo", "by prefix"); out != "by prefix\n" || code != 0 {
		t.Errorf("exec by a prefix of the lease's ID: exit %d, %q\n%s", code, out, errs)
	}
	if out, errs, code := run("", "logs", "--repo", renter, lease[:12]); !strings.Contains(out, "up\n") || code != 0 {
		t.Errorf("logs by a prefix of the lease's ID: exit %d, %q\n%s", code, out, errs)
	}
	if out, errs, code := run("to the command\n", "exec", "--repo", renter, lease, "-i", "--", "cat"); out != "to the command\n" || code != 0 {
		t.Errorf("exec -i: exit %d, stdout %q\n%s", code, out, errs)
	}
	// A terminal, from script(1)'s pseudo-terminal.
	script := exec.Command("script", "-qec", bin+" exec --repo "+renter+" "+lease+" -it -- sh -c 'tty; exit 4'", "/dev/null")
	script.Stdin = strings.NewReader("")
	tout, err := script.CombinedOutput()
	if !regexp.MustCompile(`/dev/pts/\d+`).Match(tout) || exitCode(err) != 4 {
		t.Errorf("exec -it: exit %d, %q; want a terminal and 4", exitCode(err), tout)
	}
	if bytes.IndexByte(tout, 0) >= 0 {
		t.Errorf("exec -it wrote a NUL byte the job did not: %q", tout)
	}

	// cp: a folder in, and out again, checked by SHA-256 both ways.
	src := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("alpha\n"), 0o644)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	os.WriteFile(filepath.Join(src, "sub", "b.bin"), big, 0o644)
	if _, errs, code := run("", "cp", "--repo", renter, src, lease[:12]+"…:/workspace/in/data"); code != 0 || !strings.Contains(errs, "copied 2 files, 1.0 MiB") {
		t.Errorf("cp in: exit %d\n%s", code, errs)
	}
	if out, errs, code := run("", "exec", "--repo", renter, lease, "--", "cat", "/workspace/in/data/a.txt"); out != "alpha\n" || code != 0 {
		t.Errorf("the file copied in: %q, exit %d\n%s", out, code, errs)
	}
	dst := t.TempDir()
	if _, errs, code := run("", "cp", "--repo", renter, lease+":/workspace/in/data", dst); code != 0 || !strings.Contains(errs, "SHA-256 checked") {
		t.Errorf("cp out: exit %d\n%s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "data", "sub", "b.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("the file copied out: %d bytes, %v", len(b), err)
	}
	if _, errs, code := run("", "cp", "--repo", renter, lease+":/workspace/nothing", dst); code != 1 || !strings.Contains(errs, "tar -c in the container exited") {
		t.Errorf("cp of nothing: exit %d\n%s", code, errs)
	}

	// port-forward: any free local port to the job's 8080.
	fwd := exec.Command(bin, "port-forward", "--repo", renter, lease, "0:8080")
	stderr, err := fwd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Process.Kill() })
	lines := bufio.NewScanner(stderr)
	var addr string
	for addr == "" && lines.Scan() {
		if m := forwardingLine.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("port-forward said no address: %v", lines.Err())
	}
	go io.Copy(io.Discard, stderr)
	for i := range 3 { // three connections, one after another
		resp, err := http.Get("http://" + addr + "/index.html")
		if err != nil {
			t.Fatalf("GET %d through port-forward: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello from the job\n" {
			t.Errorf("GET %d through port-forward: %s %q", i, resp.Status, body)
		}
	}

	// Another peer, told where the lease runs, is refused.
	other := renterRepo(t, bin, "other")
	note := filepath.Join(renter, repo.LogsDir, lease+".provider")
	b, err := os.ReadFile(note)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(other, repo.LogsDir), 0o700)
	os.WriteFile(filepath.Join(other, repo.LogsDir, lease+".provider"), b, 0o600)
	if _, errs, code := run("", "exec", "--repo", other, lease, "--", "true"); code != 1 || !strings.Contains(errs, "no running lease "+lease+" of yours here") {
		t.Errorf("exec by another peer: exit %d\n%s", code, errs)
	}
	if _, errs, code := run("", "port-forward", "--repo", other, lease, "0:8080"); code != 1 || !strings.Contains(errs, "no running lease "+lease+" of yours here") {
		t.Errorf("port-forward by another peer: exit %d\n%s", code, errs)
	}

	// The lease ends: sessions with it end, and none opens.
	r.cmd.Process.Signal(os.Interrupt)
	r.wait(t, 30*time.Second)
	if _, errs, code := run("", "exec", "--repo", renter, lease, "--", "true"); code != 1 || !strings.Contains(errs, "no running lease") {
		t.Errorf("exec once the lease ended: exit %d\n%s", code, errs)
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Wait() }()
	select {
	case err := <-fwdDone:
		if exitCode(err) != 1 {
			t.Errorf("port-forward after the lease: %v, want exit 1", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("port-forward still runs 30 s after its lease ended")
	}
	d.stop(t)
}
