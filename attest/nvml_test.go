//go:build cgo

package attest

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestFakeMachines(t *testing.T) {
	for _, tc := range []struct {
		machine, name, cc, model string
		minMemory                uint64
		// bandwidth (GB/s) and FP32 (GFLOPS): the data sheets' figures
		bandwidth, gflops int
	}{
		{"dgxa100", "A100", "8.0", "A100 SXM 40GB", 40 << 30, 1555, 19491},
		{"dgxh100", "H100", "9.0", "H100 SXM", 80 << 30, 3352, 66908},
		{"dgxh200", "H200", "9.0", "H200 SXM", 140 << 30, 4915, 66908},
		{"dgxb200", "B200", "10.0", "B200", 180 << 30, 8192, 74449},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			src, err := NewFake(tc.machine)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := src.Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.GPUs) != 8 || inv.Unavailable != "" || inv.DriverVersion == "" || inv.CUDAVersion == "" {
				t.Fatalf("inventory: %d GPUs, driver %q, CUDA %q, unavailable %q", len(inv.GPUs), inv.DriverVersion, inv.CUDAVersion, inv.Unavailable)
			}
			uuids := map[string]bool{}
			for i, g := range inv.GPUs {
				if g.Index != i || !strings.HasPrefix(g.UUID, "GPU-") || uuids[g.UUID] {
					t.Errorf("GPU %d: index %d, UUID %q (unique: %v)", i, g.Index, g.UUID, !uuids[g.UUID])
				}
				uuids[g.UUID] = true
				if !strings.Contains(g.Name, tc.name) || g.ComputeCapability != tc.cc || g.MemoryBytes < tc.minMemory {
					t.Errorf("GPU %d: %q, CC %s, %d bytes; want %s, %s, at least %d", i, g.Name, g.ComputeCapability, g.MemoryBytes, tc.name, tc.cc, tc.minMemory)
				}
				if m := ModelOf(g.Name, g.PCIDeviceID); m != tc.model {
					t.Errorf("GPU %d: %q (PCI %08x) is the catalog's %q; want %q", i, g.Name, g.PCIDeviceID, m, tc.model)
				}
				if g.TemperatureC == 0 || g.PowerDrawWatts == 0 || g.PowerLimitWatts == 0 || g.Serial == "" || !g.ECCEnabled || g.PCIeGeneration == 0 || g.PCIBusID == "" {
					t.Errorf("GPU %d lacks a reading: %+v", i, g)
				}
				if g.MemoryBandwidthGBps != tc.bandwidth || g.FP32GFLOPS != tc.gflops {
					t.Errorf("GPU %d: %d GB/s, %d GFLOPS; want %d and %d", i, g.MemoryBandwidthGBps, g.FP32GFLOPS, tc.bandwidth, tc.gflops)
				}
			}
		})
	}
	if _, err := NewFake("dgx1"); !errors.Is(err, ErrUnknownFake) {
		t.Errorf("unknown fake: %v", err)
	}
}

// A seeded fake finds the same GPUs every time it is built with the same
// seed, as a restarted provider finds its hardware, and other GPUs under
// another seed; the UUIDs keep NVML's form and lookups by UUID work.
func TestSeededFakeKeepsItsGPUs(t *testing.T) {
	uuids := func(seed string) []string {
		t.Helper()
		f, err := NewFakeSeeded("dgxh100", seed)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := f.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range inv.GPUs {
			out = append(out, g.UUID)
		}
		return out
	}
	a, again, b := uuids("peer-a"), uuids("peer-a"), uuids("peer-b")
	if len(a) != 8 || !slices.Equal(a, again) {
		t.Fatalf("same seed, other GPUs:\n%v\n%v", a, again)
	}
	seen := map[string]bool{}
	for _, u := range append(slices.Clone(a), b...) {
		if seen[u] || !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(u) {
			t.Errorf("UUID %q repeated or malformed", u)
		}
		seen[u] = true
	}
	f, _ := NewFakeSeeded("dgxa100", "peer-a")
	d, ret := f.lib.DeviceGetHandleByIndex(3)
	u, _ := d.GetUUID()
	if byUUID, ret2 := f.lib.DeviceGetHandleByUUID(u); ret != nvml.SUCCESS || ret2 != nvml.SUCCESS || byUUID != d {
		t.Errorf("lookup by seeded UUID %s: %v %v", u, ret, ret2)
	}
}

// A machine without the driver: Init fails with LIBRARY_NOT_FOUND, the
// inventory is empty with the reason, and nothing else is called (the
// mock panics on any function that is not set).
func TestNoDriverReportsZeroGPUsAndCallsNothingElse(t *testing.T) {
	lib := &mock.Interface{
		InitFunc:        func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
		ErrorStringFunc: func(r nvml.Return) string { return "not found" },
	}
	inv, err := NewNVMLSource(lib, "nvml").Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 0 || !strings.Contains(inv.Unavailable, "no NVIDIA driver") {
		t.Fatalf("inventory %+v, %v", inv, err)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times", n)
	}
}

// The real library, pointed at a file that does not exist: the dlopen
// fails inside Init, and the process lives on.
func TestNVMLLibraryMissing(t *testing.T) {
	inv, err := OpenNVML("/nonexistent/libnvidia-ml.so.1").Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 0 || !strings.Contains(inv.Unavailable, "no NVIDIA driver") {
		t.Fatalf("inventory %+v, %v", inv, err)
	}
}
