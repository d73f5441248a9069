package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/doctor"
	"github.com/idlegrid/idlegrid/node/repo"
)

// A new provider repository sells what NVML finds; with none, init says
// in one line why it sells nothing and what to do, and a bad
// --gpu-source is named with what is allowed.
func TestInitSellsTheGPUsNVMLFinds(t *testing.T) {
	read := localGPUs
	t.Cleanup(func() { localGPUs = read })
	// go-nvml's mock DGX H100 stands for a machine whose driver answers.
	localGPUs = func(ctx context.Context) (attest.Inventory, error) { return attest.LocalInventory(ctx, "dgxh100") }
	dir := t.TempDir() + "/gpus"
	r := runCLI(t, "init", "--repo", dir, "--profile", "provider", "--listen-port", "0", "--api-port", "0")
	if r.code != 0 || !strings.Contains(r.stdout, "this provider sells the 8 GPUs NVML finds here") {
		t.Fatalf("init on a machine with GPUs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for key, want := range map[string]string{"provider.gpu_source": "nvml", "provider.enabled": "true", "jobs.pass_gpus": "true"} {
		if got := strings.TrimSpace(runCLI(t, "config", "get", "--repo", dir, key).stdout); got != want && got != `"`+want+`"` {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}

	localGPUs = func(context.Context) (attest.Inventory, error) {
		return attest.Inventory{Unavailable: "libnvidia-ml.so.1: cannot open shared object file"}, nil
	}
	dir = t.TempDir() + "/none"
	r = runCLI(t, "init", "--repo", dir, "--profile", "provider", "--listen-port", "0", "--api-port", "0")
	var said []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "this provider ") {
			said = append(said, l)
		}
	}
	if r.code != 0 || len(said) != 1 || !strings.Contains(said[0], "sells nothing yet: no GPUs found through NVML (libnvidia-ml.so.1: cannot open") ||
		!strings.Contains(said[0], "--gpu-source fake:dgxh100") || !strings.Contains(said[0], "provider.gpu_source nvml") {
		t.Errorf("init on a machine without a driver: exit %d, want one line saying why and what to do\n%s", r.code, r.stdout)
	}
	if got := strings.TrimSpace(runCLI(t, "config", "get", "--repo", dir, "provider.enabled").stdout); got != "false" {
		t.Errorf("provider.enabled = %s with nothing to sell", got)
	}
	if r := runCLI(t, "init", "--repo", dir, "--json", "--force", "--profile", "provider", "--gpu-source", "fake:dgxh100", "--listen-port", "0", "--api-port", "0"); r.code != 0 ||
		!strings.Contains(r.stdout, `"gpu_source": "fake:dgxh100"`) || !strings.Contains(r.stdout, "mock GPUs of dgxh100") {
		t.Errorf("init --gpu-source fake:dgxh100 --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpu-source", "fake:dgx1"}, `--gpu-source "fake:dgx1": want static, nvml, or fake:dgxa100`},
		{[]string{"--gpu-source", "nvml", "--profile", "renter"}, `--gpu-source "nvml": only a provider sells GPUs`},
	} {
		r := runCLI(t, append([]string{"init", "--repo", t.TempDir() + "/bad"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("init %v: exit %d, %q; want 2 and %q", c.args, r.code, r.lastLine(), c.want)
		}
	}
}

// doctor takes a provider that sells a mock machine for the fake it is,
// rather than failing its nvml check.
func TestDoctorPassesAFakeGPUSourceAsAFake(t *testing.T) {
	dir := newRepo(t, "--profile", "provider", "--gpu-source", "fake:dgxh100")
	checks, _ := runDoctor(t, "--repo", dir)
	if c := checks["nvml"]; c.Status != doctor.CheckOK || !strings.Contains(c.Detail, "a fake") || !strings.Contains(c.Detail, "8 GPUs") {
		t.Errorf("nvml with provider.gpu_source = fake:dgxh100: %+v", c)
	}
	if c := checks["gpus in a container"]; c.Status == doctor.CheckFail {
		t.Errorf("a container check of mock GPUs: %+v", c)
	}
}

// A provider daemon that sells nothing says so in its log, and why: off
// by config, or on NVML with no driver.
func TestADaemonThatSellsNothingSaysWhy(t *testing.T) {
	bin := buildBinary(t)
	off := newRepo(t, "--profile", "provider", "--gpu-source", "static")
	d := startDaemon(t, bin, off)
	waitUp(t, bin, d)
	if !strings.Contains(d.stderr.String(), `"msg":"this provider sells nothing: provider.enabled is false"`) {
		t.Errorf("a provider with provider.enabled = false logged nothing of it:\n%s", d.stderr)
	}
	d.stop(t)

	if inv, err := attest.LocalInventory(context.Background(), ""); err == nil && inv.Unavailable == "" {
		t.Logf("NVML answers here (%d GPUs): the no-driver case needs a machine without one", len(inv.GPUs))
		return
	}
	nodriver := newRepo(t, "--profile", "provider", "--gpu-source", "nvml")
	d = startDaemon(t, bin, nodriver)
	waitUp(t, bin, d)
	said := func() bool {
		return strings.Contains(d.stderr.String(), `"msg":"this provider sells nothing","subsystem":"node","why":"no GPUs to sell: `)
	}
	if !poll(10*time.Second, 20*time.Millisecond, said) {
		t.Errorf("a provider on NVML without a driver logged nothing of it:\n%s", d.stderr)
	}
	d.stop(t)
}

// A lease goes by the start of its ID, with or without the "…" the help
// writes; a start two leases share is named as such, with them.
func TestALeaseGoesByTheStartOfItsID(t *testing.T) {
	dir := newRepo(t, "--profile", "renter")
	logs := filepath.Join(dir, repo.LogsDir)
	os.MkdirAll(logs, 0o700)
	os.WriteFile(filepath.Join(logs, "lease-4f2a01.stdout"), []byte("first\n"), 0o600)
	os.WriteFile(filepath.Join(logs, "lease-4f2a02.stdout"), []byte("second\n"), 0o600)
	for _, typed := range []string{"lease-4f2a01", "lease-4f2a01…", "lease-4f2a01..."} {
		if r := runCLI(t, "logs", "--repo", dir, typed); r.code != 0 || r.stdout != "first\n" {
			t.Errorf("logs %s: exit %d, %q\n%s", typed, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, "logs", "--repo", dir, "lease-4f2a0"); r.code != exitUsage || !strings.Contains(r.stderr, "2 leases of this repository start so (lease-4f2a01, lease-4f2a02)") {
		t.Errorf("logs by a start two leases share: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, "logs", "--repo", dir, "lease-99"); r.code != exitFailure || !strings.Contains(r.stderr, `no output kept for lease "lease-99"`) {
		t.Errorf("logs by a start no lease has: exit %d\n%s", r.code, r.stderr)
	}
}
