package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// The commands devstack prints name this binary as a shell beside it
// runs it: idlegrid when that is the one on PATH, go run ./cmd/idlegrid
// for a go run build started at the module's root, else its path.
func TestDevstackNamesItselfAsAShellRunsIt(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "idlegrid")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	other := filepath.Join(t.TempDir(), "idlegrid")
	os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "cmd", "idlegrid"), 0o755)
	os.WriteFile(filepath.Join(root, "cmd", "idlegrid", "main.go"), []byte("package main\n"), 0o644)
	goRun := filepath.Join(t.TempDir(), "go-build123", "b001", "exe", "idlegrid")
	found := func(p string) func(string) (string, error) {
		return func(string) (string, error) { return p, nil }
	}
	missing := func(string) (string, error) { return "", errors.New("not found") }
	for _, c := range []struct {
		name, exe, wd string
		look          func(string) (string, error)
		want          string
	}{
		{"on PATH", bin, dir, found(bin), "idlegrid"},
		{"another idlegrid on PATH", bin, dir, found(other), bin},
		{"go run at the module's root", goRun, root, missing, "go run ./cmd/idlegrid"},
		{"go run elsewhere", goRun, dir, missing, goRun},
		{"a path with a space", "/tmp/my tools/idlegrid", dir, missing, "'/tmp/my tools/idlegrid'"},
	} {
		if got := selfCommandOf(c.exe, c.wd, c.look); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The rent command devstack prints runs as printed, from a shell beside
// it, and rents from it.
func TestDevstacksPrintedRentRunsAsPrinted(t *testing.T) {
	executortest.BusyboxImage(t)
	bin := buildBinary(t)
	ds := exec.Command(bin, "devstack", "--nodes", "2", "--duration", "90s")
	out, err := ds.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ds.Stderr = os.Stderr
	if err := ds.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Process.Signal(syscall.SIGINT); ds.Wait() })
	lines := bufio.NewScanner(out)
	var rent string
	for rent == "" && lines.Scan() {
		if r, ok := strings.CutPrefix(lines.Text(), "Rent:        "); ok && strings.Contains(lines.Text(), "--bootstrap") {
			rent = r
		}
	}
	if rent == "" {
		t.Fatalf("devstack printed no rent command: %v", lines.Err())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if !strings.HasPrefix(rent, bin+" rent ") {
		t.Errorf("devstack named its binary, not on PATH, as %q", strings.Fields(rent)[0])
	}
	sh := exec.Command("bash", "-c", rent)
	sh.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no idlegrid on it
	done := make(chan struct{})
	var got []byte
	go func() { got, err = sh.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		sh.Process.Kill()
		<-done
	}
	if err != nil || !strings.Contains(string(got), "hello from GPU-") {
		t.Errorf("%s: %v\n%s", rent, err, got)
	}
}
