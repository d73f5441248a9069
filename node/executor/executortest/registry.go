package executortest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
)

// RegistryPath is Debian's image registry (distribution 2.8), package
// docker-registry.
const RegistryPath = "/usr/bin/docker-registry"

// Registry runs an image registry on a free loopback port, storing in a
// folder of the test's, until the test ends, and returns its address
// ("127.0.0.1:PORT"). The engine pushes to and pulls from a loopback
// registry without TLS. It fails the test when the registry is not
// installed (unless NoDockerEnv is set) or does not answer in 10 s.
func Registry(t testing.TB) string {
	t.Helper()
	Docker(t)
	if _, err := os.Stat(RegistryPath); err != nil {
		t.Fatalf("no registry at %s (%v); install one with: apt-get install -y docker-registry", RegistryPath, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(RegistryPath, "serve", cfg)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the registry: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the registry exited: %v\n%s", err, log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry at %s did not answer in 10 s: %v\n%s", addr, err, log.String())
		}
	}
}

var pushDigest = regexp.MustCompile(`digest: (sha256:[0-9a-f]{64})`)

// BuildImage builds ref, an image no engine has seen: BusyboxImage with a
// file /payload of extra random bytes on top. It is removed when the test
// ends.
func BuildImage(t testing.TB, ref string, extra int) string {
	t.Helper()
	cli := Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	buildImage(t, ctx, ref, randomPayload(extra))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return ref
}

// randomPayload is n random bytes, which pack to about as much.
func randomPayload(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func buildImage(t testing.TB, ctx context.Context, byTag string, payload []byte) {
	t.Helper()
	cli := Docker(t)
	base := BusyboxImage(t)
	var buildCtx bytes.Buffer
	tw := tar.NewWriter(&buildCtx)
	for name, body := range map[string][]byte{
		"Dockerfile": []byte("FROM " + base + "\nCOPY payload /payload\n"),
		"payload":    payload,
	} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))})
		tw.Write(body)
	}
	tw.Close()
	resp, err := cli.ImageBuild(ctx, &buildCtx, build.ImageBuildOptions{Tags: []string{byTag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build %s: %v", byTag, err)
	}
	_, err = readMessages(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("build %s: %v", byTag, err)
	}
}

// PushImage builds an image no engine has seen (see BuildImage), pushes
// it to registry as repo (tag 1) and removes it from the engine again, so
// that running it needs a pull. It returns the pushed reference by tag
// and by digest.
func PushImage(t testing.TB, registry, repo string, extra int) (byTag, byDigest string) {
	t.Helper()
	return PushPayload(t, registry, repo, randomPayload(extra))
}

// PushPayload is PushImage with /payload holding payload: zeros, say,
// which a registry holds in a few bytes and an engine unpacks whole.
func PushPayload(t testing.TB, registry, repo string, payload []byte) (byTag, byDigest string) {
	t.Helper()
	cli := Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	byTag = registry + "/" + repo + ":1"
	buildImage(t, ctx, byTag, payload)
	push, err := cli.ImagePush(ctx, byTag, image.PushOptions{RegistryAuth: "e30="}) // {}: no credentials
	if err != nil {
		t.Fatalf("push %s: %v", byTag, err)
	}
	said, err := readMessages(push)
	push.Close()
	if err != nil {
		t.Fatalf("push %s: %v", byTag, err)
	}
	m := pushDigest.FindStringSubmatch(said)
	if m == nil {
		t.Fatalf("push %s: no digest in what the engine said:\n%s", byTag, said)
	}
	if _, err := cli.ImageRemove(ctx, byTag, image.RemoveOptions{PruneChildren: true}); err != nil {
		t.Fatalf("remove %s after the push: %v", byTag, err)
	}
	byDigest = registry + "/" + repo + "@" + m[1]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cli.ImageRemove(ctx, byTag, image.RemoveOptions{Force: true, PruneChildren: true})
		cli.ImageRemove(ctx, byDigest, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return byTag, byDigest
}

// readMessages reads an engine's JSON message stream to its end and
// returns its statuses, one a line; an error message ends it as an error.
func readMessages(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	var said bytes.Buffer
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return said.String(), nil
			}
			return said.String(), err
		}
		if m.Error != nil {
			return said.String(), errors.New(m.Error.Message)
		}
		fmt.Fprintln(&said, m.ID, m.Status, m.Stream)
	}
}
