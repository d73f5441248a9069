package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/internal/testwatch"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// The Dockerfile builds offline from base images this machine makes of
// its own toolchains (local-bases.sh) and a vendored context, and its
// image runs the daemon as a non-root user that creates its repository
// on a fresh volume, answers `status`, reaches the host's Docker engine
// (`doctor`), stops cleanly on SIGTERM and comes back with the same
// identity from the same volume.
func TestTheImageBuildsOfflineAndRunsTheDaemon(t *testing.T) {
	executortest.Docker(t) // fails, naming the fix, when no engine answers
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := command(t, 10*time.Minute, root, "examples/docker/local-bases.sh")
	bases := strings.Fields(out)
	if len(bases) != 2 {
		t.Fatalf("local-bases.sh printed %q, want the two image names", out)
	}

	// The build context: the module as committed here, its dependencies
	// vendored (no proxy is reachable from the build).
	ctxDir := t.TempDir()
	if err := copyModule(root, ctxDir); err != nil {
		t.Fatal(err)
	}
	command(t, 5*time.Minute, root, "go", "mod", "vendor", "-o", filepath.Join(ctxDir, "vendor"))

	suffix := randomSuffix(t)
	image := "idlegrid-test/idlegrid:" + suffix
	start := time.Now()
	command(t, 20*time.Minute, ctxDir, "env", "DOCKER_BUILDKIT=0", "docker", "build", "-q",
		"-f", "examples/docker/Dockerfile", "-t", image,
		"--build-arg", "GO_IMAGE="+bases[0], "--build-arg", "RUNTIME_IMAGE="+bases[1],
		"--build-arg", "GOFLAGS=-mod=vendor", ".")
	t.Logf("built %s in %s", image, time.Since(start).Round(time.Second))
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })

	if user := strings.TrimSpace(command(t, time.Minute, "", "docker", "image", "inspect", "-f", "{{.Config.User}}", image)); user != "65532:65532" {
		t.Errorf("the image runs as %q, want the non-root 65532:65532", user)
	}
	if vols := command(t, time.Minute, "", "docker", "image", "inspect", "-f", "{{json .Config.Volumes}}", image); !strings.Contains(vols, `"/var/lib/idlegrid"`) {
		t.Errorf("the image's volumes are %s, want the repository /var/lib/idlegrid", vols)
	}

	volume, name := "idlegrid-test-"+suffix, "idlegrid-test-"+suffix
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", name).Run()
		exec.Command("docker", "volume", "rm", "-f", volume).Run()
	})
	sock := dockerSocket()
	info, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("the Docker socket: %v", err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("the Docker socket %s: no owner to read", sock)
	}
	gid := strconv.FormatUint(uint64(st.Gid), 10)
	command(t, time.Minute, "", "docker", "run", "-d", "--name", name, "--network", "none",
		"--group-add", gid, "-v", sock+":/var/run/docker.sock", "-v", volume+":/var/lib/idlegrid", image)
	waitLog(t, name, "idlegrid daemon ready", 1)

	if uid := command(t, time.Minute, "", "docker", "top", name, "-eo", "pid,uid"); !strings.Contains(uid, "65532") {
		t.Errorf("the daemon's process runs as:\n%s\nwant uid 65532", uid)
	}
	first := peerID(t, name)
	var checks []struct{ Check, Status, Detail string }
	doctor, _ := exec.Command("docker", "exec", name, "idlegrid", "doctor", "--json").Output() // exits 1: no GPU here
	if err := json.Unmarshal(doctor, &checks); err != nil {
		t.Fatalf("doctor --json in the container: %v\n%s", err, doctor)
	}
	docker := false
	for _, c := range checks {
		if c.Check == "docker" {
			docker = c.Status == "ok"
			t.Logf("doctor in the container: docker %s: %s", c.Status, c.Detail)
		}
	}
	if !docker {
		t.Errorf("the daemon in the container does not reach the host's Docker engine: %s", doctor)
	}

	stop := time.Now()
	command(t, time.Minute, "", "docker", "stop", "-t", "15", name)
	took := time.Since(stop)
	if code := strings.TrimSpace(command(t, time.Minute, "", "docker", "inspect", "-f", "{{.State.ExitCode}}", name)); code != "0" {
		t.Errorf("the daemon exited %s on SIGTERM, want 0:\n%s", code, tail(logs(name), 4000))
	}
	t.Logf("docker stop: the daemon exited in %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("docker stop took %s; the daemon stops within 5 s of SIGTERM", took.Round(time.Millisecond))
	}
	command(t, time.Minute, "", "docker", "start", name)
	waitLog(t, name, "idlegrid daemon ready", 2)
	if again := peerID(t, name); again != first {
		t.Errorf("after a restart the node is %s, was %s: the repository did not stay on the volume", again, first)
	}
}

// command runs name args in dir (the current one when empty) and returns
// its standard output; it fails the test, with both outputs, when the
// command fails or outlives limit.
func command(t *testing.T, limit time.Duration, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), tail(stderr.String(), 4000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// copyModule copies the module at root into dir, its git metadata and
// compiled tests aside.
func copyModule(root, dir string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "vendor"):
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case !d.Type().IsRegular() || strings.HasSuffix(d.Name(), ".test") || rel == "idlegrid":
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, info.Mode().Perm())
	})
}

// dockerSocket is the engine's Unix socket: DOCKER_HOST's, or the default.
func dockerSocket() string {
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		return h
	}
	return "/var/run/docker.sock"
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// logs is the container's whole log, both streams.
func logs(name string) string {
	out, _ := exec.Command("docker", "logs", name).CombinedOutput()
	return string(out)
}

// waitLog waits up to a minute for the container's log to hold line at
// least n times.
func waitLog(t *testing.T, name, line string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		l := logs(name)
		if strings.Count(l, line) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q (%d) in a minute; the container's log:\n%s", line, n, tail(l, 4000))
		}
		time.Sleep(200 * time.Millisecond) // poll, under the deadline above
	}
}

// peerID asks the daemon in the container for its status.
func peerID(t *testing.T, name string) string {
	t.Helper()
	var st struct {
		PeerID string `json:"peer_id"`
	}
	out := command(t, time.Minute, "", "docker", "exec", name, "idlegrid", "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.PeerID == "" {
		t.Fatalf("status --json in the container: %v\n%s", err, out)
	}
	return st.PeerID
}

// TestMain names, at the end of the output, the tests still running
// shortly before go test's -timeout would end the binary.
func TestMain(m *testing.M) { os.Exit(testwatch.Run(m)) }
