// Package executortest gives tests a real Docker engine, an image to run
// on it without a registry, and a buffer to watch a job's output.
//
// A test that calls Docker or BusyboxImage FAILS when no engine answers:
// a container test that silently skips proves nothing. On a machine that
// cannot run Docker, IDLEGRID_NO_DOCKER=1 turns the failure into a skip
// with a message; CI never sets it.
//
// executortest imports node/executor and the Docker client; only tests
// import it.
package executortest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/idlegrid/idlegrid/node/executor"
)

// NoDockerEnv names the opt-out: set to "1", tests that need a Docker
// engine skip instead of failing.
const NoDockerEnv = "IDLEGRID_NO_DOCKER"

// BusyboxImageName is the image BusyboxImage provides.
const BusyboxImageName = executor.BusyboxImage

// BusyboxPath is the static busybox the image is built from.
const BusyboxPath = executor.BusyboxPath

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
	Docker(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	d, err := executor.NewDocker()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := d.EnsureBusybox(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return name
}
