//go:build cgo

package attest

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// NewFake returns a source over one of go-nvml's mock DGX servers
// (FakeMachines), with the readings the mocks leave out filled in:
// temperature, power, utilisation, PCIe link, serial, VBIOS, ECC and no
// running processes. It serves tests and the devstack; it is never the
// real thing. UUIDs are random per call, as on the mocks.
func NewFake(machine string) (*NVMLSource, error) {
	var s *server.Server
	switch machine {
	case "dgxa100":
		s = dgxa100.New()
	case "dgxh100":
		s = dgxh100.New()
	case "dgxh200":
		s = dgxh200.New()
	case "dgxb200":
		s = dgxb200.New()
	default:
		return nil, fmt.Errorf("%w %q: want one of %v", ErrUnknownFake, machine, FakeMachines)
	}
	for i, d := range s.Devices {
		fillFakeReadings(i, d.(*server.Device))
	}
	return NewNVMLSource(s, "fake "+machine), nil
}

// fillFakeReadings gives device i plausible, deterministic readings.
func fillFakeReadings(i int, d *server.Device) {
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(34 + 3*i), nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(60_000 + 5_000*i), nvml.SUCCESS }
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: uint32(i % 3)}, nvml.SUCCESS }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetSerialFunc = func() (string, nvml.Return) { return fmt.Sprintf("FAKE%010d", 1650000000+i), nvml.SUCCESS }
	d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.AF.00.01", nvml.SUCCESS }
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for j, c := range []byte(d.PciBusID) {
			if j < len(p.BusId)-1 {
				p.BusId[j] = int8(c)
			}
		}
		return p, nvml.SUCCESS
	}
}
