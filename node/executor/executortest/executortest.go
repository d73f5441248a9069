// Package executortest gives tests a real Docker engine, an image to run
// on it without a registry, and a buffer to watch a job's output.
//
// A test that calls Docker or BusyboxImage FAILS when no engine answers:
// a container test that silently skips proves nothing. On a machine that
// cannot run Docker, IDLEGRID_NO_DOCKER=1 turns the failure into a skip
// with a message; CI never sets it.
//
// It must not import package executor, whose own tests use it.
package executortest

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// NoDockerEnv names the opt-out: set to "1", tests that need a Docker
// engine skip instead of failing.
const NoDockerEnv = "IDLEGRID_NO_DOCKER"

// BusyboxImageName is the image BusyboxImage provides: a static busybox
// with every applet linked into /bin, and PATH=/bin.
const BusyboxImageName = "idlegrid-test/busybox:1"

// BusyboxPath is the static busybox the image is built from (Debian's
// busybox-static package).
const BusyboxPath = "/bin/busybox"

// startHint tells a developer how to get an engine this package accepts.
const startHint = "start one as root with:\n" +
	"  apt-get install -y docker.io busybox-static\n" +
	"  dockerd --iptables=false --ip-forward=false --bridge=none >/tmp/dockerd.log 2>&1 &\n" +
	"or set " + NoDockerEnv + "=1 to skip the tests that need it"

// Docker returns a client of the engine DOCKER_HOST (or the local socket)
// names, closed when the test ends. It fails the test when the engine does
// not answer within 10 s, unless NoDockerEnv is set.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	if os.Getenv(NoDockerEnv) == "1" {
		t.Skipf("%s=1: skipping a test that needs a Docker engine", NoDockerEnv)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("no Docker engine at %s: %v\n%s", cli.DaemonHost(), err, startHint)
	}
	return cli
}

var imageMu sync.Mutex // one import at a time in this process

// BusyboxImage makes sure BusyboxImageName is present on the engine,
// importing it from BusyboxPath when it is not, and returns its name.
func BusyboxImage(t testing.TB) string {
	t.Helper()
	cli := Docker(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cli.ImageInspect(ctx, BusyboxImageName)
	if err == nil {
		return BusyboxImageName
	}
	if !cerrdefs.IsNotFound(err) {
		t.Fatalf("inspect %s: %v", BusyboxImageName, err)
	}
	rootfs, err := busyboxRootfs()
	if err != nil {
		t.Fatalf("build %s: %v", BusyboxImageName, err)
	}
	resp, err := cli.ImageImport(ctx,
		image.ImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"},
		BusyboxImageName,
		image.ImportOptions{Changes: []string{"ENV PATH=/bin"}})
	if err != nil {
		t.Fatalf("import %s: %v", BusyboxImageName, err)
	}
	msg, _ := io.ReadAll(resp)
	resp.Close()
	if _, err := cli.ImageInspect(ctx, BusyboxImageName); err != nil {
		t.Fatalf("import %s: not present afterwards (%v); engine said: %s", BusyboxImageName, err, msg)
	}
	return BusyboxImageName
}

// busyboxRootfs returns a tar of /bin/busybox, a symlink to it for each of
// its applets, and an empty /tmp.
func busyboxRootfs() ([]byte, error) {
	bin, err := staticBusybox()
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			hdrs = append(hdrs, &tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	for _, h := range hdrs {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Name == "bin/busybox" {
			if _, err := tw.Write(bin); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// staticBusybox reads BusyboxPath and refuses a dynamically linked one,
// which could not run in an image with no libc.
func staticBusybox() ([]byte, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, errNotStatic
		}
	}
	return bin, nil
}

var errNotStatic = errors.New(BusyboxPath + " is dynamically linked: apt-get install -y busybox-static")
