package executortest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/idlegrid/idlegrid/node/executor"
)

// SecondEngine runs a Docker engine of its own, beside the one Docker
// answers, with its own folders, until the test ends, and returns its
// address (unix://…): a provider's engine that has not seen the images of
// this machine's. It holds BusyboxImage too, when withBusybox is set.
// Like Docker, it fails the test when no engine can run here.
func SecondEngine(t testing.TB, withBusybox bool) string {
	t.Helper()
	Docker(t)                                  // the first engine answers, so one can run here
	dir, err := os.MkdirTemp("", "ig-engine-") // short: a socket's path is bounded
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	cmd := exec.Command("dockerd", "--data-root", filepath.Join(dir, "root"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "pid"), "-H", "unix://"+sock, "--iptables=false", "--ip-forward=false", "--bridge=none")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("start a second engine: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	})
	host := "unix://" + sock
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the second engine exited: %v\n%s", err, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second engine did not answer in 60 s: %v\n%s", err, log.String())
		}
	}
	if withBusybox {
		d, err := executor.NewDocker(executor.DockerHost(host))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := d.EnsureBusybox(ctx); err != nil {
			t.Fatalf("busybox on the second engine: %v", err)
		}
	}
	return host
}
