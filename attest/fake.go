//go:build cgo

package attest

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Fake is a GPU source over one of go-nvml's mock DGX servers whose GPUs a
// test (or the devstack) can make busy or hot. It is never the real thing.
type Fake struct {
	*NVMLSource
	mu   sync.Mutex
	busy map[int]bool
	temp map[int]uint32
	cc   CCMaker // nil: CC mode off
}

// CCMaker makes GPU i's CC evidence over nonce, as a GPU in CC mode would:
// an SPDM report and the certificate chain whose leaf signed it.
type CCMaker func(i int, nonce []byte) (report, chain []byte)

// EnableCC puts the fake machine in confidential-computing mode, its
// evidence made by m (tests sign it with their own certificate authority:
// only a real H100/H200 has NVIDIA's).
func (f *Fake) EnableCC(m CCMaker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cc = m
}

func (f *Fake) ccMaker() CCMaker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cc
}

// SetBusy makes GPU i report a running compute process (or none).
func (f *Fake) SetBusy(i int, busy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy[i] = busy
}

// SetTemperature makes GPU i report c degrees Celsius.
func (f *Fake) SetTemperature(i int, c uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.temp[i] = c
}

// NewFake returns a source over one of go-nvml's mock DGX servers
// (FakeMachines), with the readings the mocks leave out filled in:
// temperature, power, utilisation, PCIe link, memory bus and clocks,
// CUDA cores, serial, VBIOS, ECC and no running processes. It serves tests and the devstack; it is never the
// real thing. UUIDs are random per call, as on the mocks; NewFakeSeeded
// makes them a function of a seed.
func NewFake(machine string) (*Fake, error) {
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
	f := &Fake{NVMLSource: NewNVMLSource(s, "fake "+machine), busy: map[int]bool{}, temp: map[int]uint32{}}
	s.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	s.SystemGetConfComputeStateFunc = func() (nvml.ConfComputeSystemState, nvml.Return) {
		st := nvml.ConfComputeSystemState{CcFeature: nvml.CC_SYSTEM_FEATURE_DISABLED}
		if f.ccMaker() != nil {
			st.CcFeature = nvml.CC_SYSTEM_FEATURE_ENABLED
		}
		return st, nvml.SUCCESS
	}
	for i, d := range s.Devices {
		f.fillReadings(i, d.(*server.Device))
		f.fillCC(i, d.(*server.Device))
	}
	return f, nil
}

// NewFakeSeeded is NewFake with GPU UUIDs derived from seed, machine and
// index, so that the same seed (a provider's peer ID) finds the same GPUs
// after a restart, as it would on real hardware, and two seeds never
// share a GPU.
func NewFakeSeeded(machine, seed string) (*Fake, error) {
	f, err := NewFake(machine)
	if err != nil {
		return nil, err
	}
	for i, d := range f.NVMLSource.lib.(*server.Server).Devices {
		sum := sha256.Sum256(fmt.Appendf(nil, "idlegrid fake GPU\x00%s\x00%s\x00%d", seed, machine, i))
		sum[6] = sum[6]&0x0f | 0x50 // a name-based UUID (version 5 layout)
		sum[8] = sum[8]&0x3f | 0x80
		d.(*server.Device).UUID = fmt.Sprintf("GPU-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	}
	return f, nil
}

// fakeSpecs are the memory bus width (bits), memory and SM top clocks
// (MHz) and CUDA cores of the mock machines' GPUs, as NVIDIA's data
// sheets give them: what NVML reports on the real cards.
var fakeSpecs = map[string]struct{ bus, memMHz, smMHz, cores uint32 }{
	"NVIDIA A100-SXM4-40GB":   {5120, 1215, 1410, 6912},  // 1,555 GB/s, 19.5 TFLOPS
	"NVIDIA H100 80GB HBM3":   {5120, 2619, 1980, 16896}, // 3,352 GB/s, 66.9 TFLOPS
	"NVIDIA H200 141GB HBM3e": {6144, 3200, 1980, 16896}, // 4,915 GB/s
	"NVIDIA B200 180GB HBM3e": {8192, 4000, 1965, 18944}, // 8,192 GB/s
}

// fillReadings gives device i plausible, deterministic readings.
func (f *Fake) fillReadings(i int, d *server.Device) {
	name, _ := d.GetName()
	if spec, ok := fakeSpecs[strings.TrimPrefix(name, "Mock ")]; ok {
		d.GetMemoryBusWidthFunc = func() (uint32, nvml.Return) { return spec.bus, nvml.SUCCESS }
		d.GetNumGpuCoresFunc = func() (int, nvml.Return) { return int(spec.cores), nvml.SUCCESS }
		d.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			switch c {
			case nvml.CLOCK_MEM:
				return spec.memMHz, nvml.SUCCESS
			case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
				return spec.smMHz, nvml.SUCCESS
			}
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
	} else {
		d.GetMemoryBusWidthFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetNumGpuCoresFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c, ok := f.temp[i]; ok {
			return c, nvml.SUCCESS
		}
		return uint32(34 + 3*i), nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(60_000 + 5_000*i), nvml.SUCCESS }
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: uint32(i % 3)}, nvml.SUCCESS }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetSerialFunc = func() (string, nvml.Return) { return fmt.Sprintf("FAKE%010d", 1650000000+i), nvml.SUCCESS }
	d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.AF.00.01", nvml.SUCCESS }
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.busy[i] {
			return []nvml.ProcessInfo{{Pid: uint32(4000 + i), UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
		}
		return nil, nvml.SUCCESS
	}
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

// fillCC answers device i's CC queries through the CCMaker, or with
// NOT_SUPPORTED while CC mode is off.
func (f *Fake) fillCC(i int, d *server.Device) {
	d.GetConfComputeGpuCertificateFunc = func() (nvml.ConfComputeGpuCertificate, nvml.Return) {
		var c nvml.ConfComputeGpuCertificate
		m := f.ccMaker()
		if m == nil {
			return c, nvml.ERROR_NOT_SUPPORTED
		}
		_, chain := m(i, make([]byte, NonceSize))
		c.AttestationCertChainSize = uint32(copy(c.AttestationCertChain[:], chain))
		return c, nvml.SUCCESS
	}
	d.GetConfComputeGpuAttestationReportFunc = func(r *nvml.ConfComputeGpuAttestationReport) nvml.Return {
		m := f.ccMaker()
		if m == nil {
			return nvml.ERROR_NOT_SUPPORTED
		}
		report, _ := m(i, r.Nonce[:])
		r.AttestationReportSize = uint32(copy(r.AttestationReport[:], report))
		return nvml.SUCCESS
	}
}
