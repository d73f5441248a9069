//go:build cgo

package attest

import (
	"context"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLSource reads GPUs through NVML. The library is opened at run time by
// Init; after a failed Init no other NVML function is called (one would
// kill the process on a machine without the driver).
type NVMLSource struct {
	lib  nvml.Interface
	name string
}

// OpenNVML returns a source over the system's libnvidia-ml, or the one at
// libraryPath when it is not empty.
func OpenNVML(libraryPath string) *NVMLSource {
	var opts []nvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, nvml.WithLibraryPath(libraryPath))
	}
	return &NVMLSource{lib: nvml.New(opts...), name: "nvml"}
}

// NewNVMLSource reads GPUs through lib, any nvml.Interface (the fake
// machines pass go-nvml's mock servers).
func NewNVMLSource(lib nvml.Interface, name string) *NVMLSource {
	return &NVMLSource{lib: lib, name: name}
}

// Inventory initialises NVML, reads every device and shuts NVML down.
func (s *NVMLSource) Inventory(ctx context.Context) (Inventory, error) {
	inv := Inventory{Source: s.name, GPUs: []GPU{}}
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		inv.Unavailable = fmt.Sprintf("NVML did not initialise: %s (no NVIDIA driver on this machine?)", s.lib.ErrorString(ret))
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			inv.Unavailable = "no NVIDIA driver: libnvidia-ml.so.1 was not found"
		}
		return inv, nil
	}
	defer s.lib.Shutdown()
	if v, ret := s.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := s.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	err := s.devices(ctx, func(i int, dev nvml.Device) error {
		inv.GPUs = append(inv.GPUs, readGPU(i, dev))
		return nil
	})
	return inv, err
}

// devices calls f with each device NVML lists; Init must have succeeded.
func (s *NVMLSource) devices(ctx context.Context, f func(i int, dev nvml.Device) error) error {
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: device count: %s", s.lib.ErrorString(ret))
	}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml: device %d: %s", i, s.lib.ErrorString(ret))
		}
		if err := f(i, dev); err != nil {
			return fmt.Errorf("nvml: device %d: %w", i, err)
		}
	}
	return nil
}

// readGPU reads what NVML tells of one device; a query the device does not
// support leaves its field at zero.
func readGPU(i int, d nvml.Device) GPU {
	g := GPU{Index: i, Processes: []Process{}}
	ok := func(r nvml.Return) bool { return r == nvml.SUCCESS }
	if v, r := d.GetUUID(); ok(r) {
		g.UUID = v
	}
	if v, r := d.GetName(); ok(r) {
		g.Name = v
	}
	if m, r := d.GetMemoryInfo(); ok(r) {
		g.MemoryBytes, g.MemoryUsedBytes = m.Total, m.Used
	}
	if major, minor, r := d.GetCudaComputeCapability(); ok(r) {
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if p, r := d.GetPciInfo(); ok(r) {
		g.PCIDeviceID = p.PciDeviceId
		if g.PCIBusID = busID(p.BusId[:]); g.PCIBusID == "" {
			g.PCIBusID = busID(p.BusIdLegacy[:])
		}
	}
	if v, r := d.GetCurrPcieLinkGeneration(); ok(r) {
		g.PCIeGeneration = v
	}
	if v, r := d.GetCurrPcieLinkWidth(); ok(r) {
		g.PCIeWidth = v
	}
	if v, r := d.GetMaxPcieLinkGeneration(); ok(r) {
		g.PCIeMaxGeneration = v
	}
	if v, r := d.GetMaxPcieLinkWidth(); ok(r) {
		g.PCIeMaxWidth = v
	}
	if bus, r := d.GetMemoryBusWidth(); ok(r) {
		if mhz, r := d.GetMaxClockInfo(nvml.CLOCK_MEM); ok(r) {
			g.MemoryBandwidthGBps = int(uint64(bus) * uint64(mhz) * 2 / 8 / 1000) // double data rate
		}
	}
	if cores, r := d.GetNumGpuCores(); ok(r) {
		if mhz, r := d.GetMaxClockInfo(nvml.CLOCK_SM); ok(r) {
			g.FP32GFLOPS = int(uint64(cores) * 2 * uint64(mhz) / 1000) // a fused multiply-add a core a clock
		}
	}
	if v, r := d.GetPowerManagementLimit(); ok(r) {
		g.PowerLimitWatts = float64(v) / 1000
	}
	if v, r := d.GetPowerUsage(); ok(r) {
		g.PowerDrawWatts = float64(v) / 1000
	}
	if v, r := d.GetTemperature(nvml.TEMPERATURE_GPU); ok(r) {
		g.TemperatureC = int(v)
	}
	if u, r := d.GetUtilizationRates(); ok(r) {
		g.UtilizationPct = int(u.Gpu)
	}
	if cur, _, r := d.GetEccMode(); ok(r) {
		g.ECCEnabled = cur == nvml.FEATURE_ENABLED
	}
	if cur, _, r := d.GetMigMode(); ok(r) {
		g.MIGEnabled = cur == nvml.DEVICE_MIG_ENABLE
	}
	if v, r := d.GetSerial(); ok(r) {
		g.Serial = v
	}
	if v, r := d.GetVbiosVersion(); ok(r) {
		g.VBIOS = v
	}
	if ps, r := d.GetComputeRunningProcesses(); ok(r) {
		for _, p := range ps {
			g.Processes = append(g.Processes, Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
		}
	}
	return g
}

func busID(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// CCEvidence reads each GPU's CC attestation report over nonce and its
// certificate chain, when the system's CC feature is on. Off, unsupported
// or no driver: no evidence and no error.
func (s *NVMLSource) CCEvidence(ctx context.Context, nonce []byte) ([]CCEvidence, error) {
	if len(nonce) != NonceSize {
		return nil, fmt.Errorf("CC nonce of %d bytes, want %d", len(nonce), NonceSize)
	}
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		return nil, nil
	}
	defer s.lib.Shutdown()
	st, ret := s.lib.SystemGetConfComputeState()
	if ret != nvml.SUCCESS || st.CcFeature != nvml.CC_SYSTEM_FEATURE_ENABLED {
		return nil, nil
	}
	var out []CCEvidence
	err := s.devices(ctx, func(_ int, dev nvml.Device) error {
		ev, err := readCC(s.lib, dev, nonce)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readCC reads one device's CC evidence; sizes NVML reports beyond its
// own buffers are refused rather than trusted.
func readCC(lib nvml.Interface, d nvml.Device, nonce []byte) (CCEvidence, error) {
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return CCEvidence{}, fmt.Errorf("uuid: %s", lib.ErrorString(ret))
	}
	cert, ret := d.GetConfComputeGpuCertificate()
	if ret != nvml.SUCCESS {
		return CCEvidence{}, fmt.Errorf("CC certificate: %s", lib.ErrorString(ret))
	}
	var rep nvml.ConfComputeGpuAttestationReport
	copy(rep.Nonce[:], nonce)
	if ret := d.GetConfComputeGpuAttestationReport(&rep); ret != nvml.SUCCESS {
		return CCEvidence{}, fmt.Errorf("CC report: %s", lib.ErrorString(ret))
	}
	if int(cert.AttestationCertChainSize) > len(cert.AttestationCertChain) || int(rep.AttestationReportSize) > len(rep.AttestationReport) {
		return CCEvidence{}, fmt.Errorf("CC evidence sizes out of range (%d, %d)", cert.AttestationCertChainSize, rep.AttestationReportSize)
	}
	return CCEvidence{
		UUID:      uuid,
		Report:    slices.Clone(rep.AttestationReport[:rep.AttestationReportSize]),
		CertChain: slices.Clone(cert.AttestationCertChain[:cert.AttestationCertChainSize]),
	}, nil
}
