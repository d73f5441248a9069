package attest

import (
	"context"

	"github.com/idlegrid/idlegrid/market/gpus"
)

// GPU is what an inventory knows of one GPU.
type GPU struct {
	Index             int    `json:"index"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	MemoryBytes       uint64 `json:"memory_bytes"`
	MemoryUsedBytes   uint64 `json:"memory_used_bytes"`
	ComputeCapability string `json:"compute_capability"`
	PCIBusID          string `json:"pci_bus_id"`
	PCIDeviceID       uint32 `json:"pci_device_id"`
	PCIeGeneration    int    `json:"pcie_generation"`
	PCIeWidth         int    `json:"pcie_width"`
	// PCIeMaxGeneration and PCIeMaxWidth are the link the GPU and its
	// slot can run at: what an offer says (the current link trains down
	// while the GPU idles).
	PCIeMaxGeneration int `json:"pcie_max_generation,omitempty"`
	PCIeMaxWidth      int `json:"pcie_max_width,omitempty"`
	// MemoryBandwidthGBps is the bus width times the memory's top clock,
	// and FP32GFLOPS the CUDA cores times two times the SM's top clock:
	// peaks NVML's figures give; 0 where it has none.
	MemoryBandwidthGBps int       `json:"memory_bandwidth_gbps,omitempty"`
	FP32GFLOPS          int       `json:"fp32_gflops,omitempty"`
	PowerLimitWatts     float64   `json:"power_limit_watts"`
	PowerDrawWatts      float64   `json:"power_draw_watts"`
	TemperatureC        int       `json:"temperature_c"`
	UtilizationPct      int       `json:"utilization_pct"`
	ECCEnabled          bool      `json:"ecc_enabled"`
	MIGEnabled          bool      `json:"mig_enabled"`
	Serial              string    `json:"serial"`
	VBIOS               string    `json:"vbios"`
	Processes           []Process `json:"processes"`
}

// Process is a compute process running on a GPU.
type Process struct {
	PID             uint32 `json:"pid"`
	UsedMemoryBytes uint64 `json:"used_memory_bytes"`
}

// Inventory is one reading of a machine's GPUs. With no GPUs, Unavailable
// says why (no driver, no cgo, …).
type Inventory struct {
	Source        string `json:"source"`
	DriverVersion string `json:"driver_version"`
	CUDAVersion   string `json:"cuda_version"`
	GPUs          []GPU  `json:"gpus"`
	Unavailable   string `json:"unavailable,omitempty"`
}

// GPUSource reads a machine's GPUs.
type GPUSource interface {
	// Inventory reads every GPU now. A machine without GPUs or without a
	// driver is not an error: it is an inventory with no GPUs and a reason.
	Inventory(ctx context.Context) (Inventory, error)
}

// FakeMachines names the fake machines NewFake builds, on go-nvml's mock
// servers (8 GPUs each).
var FakeMachines = []string{"dgxa100", "dgxh100", "dgxh200", "dgxb200"}

// ModelOf names a GPU as offers do: by its NVML device name, or, for a
// name the GPU catalog lacks, its PCI device ID (NVML's pciDeviceId; 0
// if unknown), the catalog's canonical ID ("NVIDIA H100 80GB HBM3" is
// "H100 SXM", "NVIDIA GeForce RTX 4090" is "RTX 4090"); a GPU the
// catalog lacks keeps its name without the vendor word.
func ModelOf(name string, pciDeviceID uint32) string {
	return gpus.Default().ModelName(name, pciDeviceID)
}

// VRAMOf is the memory a GPU of this model and NVML total is sold as
// (the catalog's marketed size; see gpus.Catalog.MarketedBytes).
func VRAMOf(model string, totalBytes uint64) uint64 {
	return gpus.Default().MarketedBytes(model, totalBytes)
}

// CCEvidence is one GPU's confidential-computing evidence over a nonce:
// the SPDM measurement report and the certificate chain whose leaf signed
// it (see VerifyCC).
type CCEvidence struct {
	UUID      string
	Report    []byte
	CertChain []byte
}

// CCSource is a GPU source that can give confidential-computing evidence.
type CCSource interface {
	// CCEvidence returns the evidence of every GPU in CC mode, made over
	// nonce (NonceSize bytes); none when the machine is not in CC mode.
	CCEvidence(ctx context.Context, nonce []byte) ([]CCEvidence, error)
}

// LocalInventory reads this machine's GPUs through NVML, or, when fake
// names one of FakeMachines, the fake machine built on go-nvml's mocks.
// A machine without a driver gives an empty inventory with the reason.
func LocalInventory(ctx context.Context, fake string) (Inventory, error) {
	if fake != "" {
		src, err := NewFake(fake)
		if err != nil {
			return Inventory{}, err
		}
		return src.Inventory(ctx)
	}
	return OpenNVML("").Inventory(ctx)
}
