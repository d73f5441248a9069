package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node/doctor"
	"github.com/idlegrid/idlegrid/node/repo"
)

func runDoctor(t *testing.T, args ...string) (map[string]doctor.Check, result) {
	t.Helper()
	r := runCLI(t, append([]string{"doctor", "--json"}, args...)...)
	var checks []doctor.Check
	if err := json.Unmarshal([]byte(r.stdout), &checks); err != nil {
		t.Fatalf("doctor --json: %v\n%+v", err, r)
	}
	byName := map[string]doctor.Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	return byName, r
}

func TestDoctor(t *testing.T) {
	dir := newRepo(t, "--profile", "provider")
	checks, r := runDoctor(t, "--repo", dir)
	for _, name := range []string{"repository", "nvml", "docker", "gpu runtime", "gpus in a container", "disk for images", "ports", "reachability", "clock"} {
		if _, ok := checks[name]; !ok {
			t.Errorf("no %q check: %v", name, checks)
		}
	}
	if c := checks["docker"]; c.Status != doctor.CheckOK && os.Getenv("IDLEGRID_NO_DOCKER") == "" {
		t.Errorf("docker: %+v (the tests run a Docker engine)", c)
	}
	if c := checks["reachability"]; c.Status != doctor.CheckSkip || !strings.Contains(c.Detail, "idlegrid daemon") {
		t.Errorf("reachability without a daemon: %+v", c)
	}
	failed := 0
	for _, c := range checks {
		if c.Status == doctor.CheckFail {
			failed++
		}
	}
	if (failed == 0) != (r.code == 0) {
		t.Errorf("exit %d with %d failed checks", r.code, failed)
	}

	// A key others can read, and a port another holds: both fail, named,
	// with what to do, and doctor exits 1.
	os.Chmod(filepath.Join(dir, repo.IdentityFile), 0o644)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	setConfig(t, dir, "api.port", fmt.Sprint(port))
	checks, r = runDoctor(t, "--repo", dir)
	if c := checks["repository"]; c.Status != doctor.CheckFail || !strings.Contains(c.Detail, "identity.key is mode 0644") || !strings.Contains(c.Fix, "chmod 600") {
		t.Errorf("repository with a readable key: %+v", c)
	}
	if c := checks["ports"]; c.Status != doctor.CheckFail || !strings.Contains(c.Detail, fmt.Sprint(port)) {
		t.Errorf("ports with api.port taken: %+v", c)
	}
	if r.code != 1 || !strings.Contains(r.lastLine(), "checks failed") {
		t.Errorf("doctor with failures: exit %d, %q", r.code, r.lastLine())
	}

	// GPUs (go-nvml's mock DGX H100): the engine must attach them.
	checks, _ = runDoctor(t, "--repo", dir, "--fake", "dgxh100")
	if c := checks["nvml"]; c.Status != doctor.CheckOK || !strings.Contains(c.Detail, "8 GPUs") {
		t.Errorf("nvml on a fake DGX H100: %+v", c)
	}
	rt, inContainer := checks["gpu runtime"], checks["gpus in a container"]
	if rt.Status == doctor.CheckFail && (inContainer.Status != doctor.CheckFail || !strings.Contains(inContainer.Fix, "NVIDIA Container Toolkit")) {
		t.Errorf("an engine without the NVIDIA runtime, and a container given GPUs: %+v", inContainer)
	}

	if r := runCLI(t, "doctor", "--repo", dir, "--fake", "dgx1"); r.code != 2 || !strings.Contains(r.lastLine(), "dgxh100") {
		t.Errorf("doctor --fake dgx1: exit %d, %q", r.code, r.lastLine())
	}
}
