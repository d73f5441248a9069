package gpus_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/gpus"
)

// Spellings of GPUs as public sources write them, and what each names.
// Sources (facts: names, not copied text):
//
//   - NVML: the strings nvmlDeviceGetName returns, as nvidia-smi prints
//     them and as RunPod's public list of GPU types gives them as IDs
//     (docs.runpod.io, "GPU types": "NVIDIA A100-SXM4-80GB", "NVIDIA
//     H100 80GB HBM3", "Tesla V100-SXM2-32GB", ...), and go-nvml's mock
//     machines ("Mock NVIDIA A100-SXM4-40GB");
//   - Kubernetes: NVIDIA's GPU feature discovery labels nodes with
//     nvidia.com/gpu.product, the NVML name with dashes for spaces
//     ("NVIDIA-A100-SXM4-80GB", "Tesla-T4");
//   - RunPod's display names in the same list ("A100 PCIe", "H100 SXM",
//     "RTX 6000 Ada", "RTX PRO 6000");
//   - Vast.ai's search filter names (gpu_name in `vastai search offers`,
//     its public API): "Q RTX 8000", "RTX 4070S Ti", "A100 SXM4", "A100
//     PCIE", "Tesla V100", "RTX 6000Ada", "GH200 SXM", "RTX PRO 6000 WS";
//   - NVIDIA's product pages and spec sheets for the names with memory
//     ("A100 80GB PCIe", "H100 NVL 94GB", "RTX 5060 Ti 16GB") and the
//     RTX PRO Blackwell and Ada workstation lines;
//   - Google Cloud's accelerator types ("nvidia-tesla-t4",
//     "nvidia-h100-80gb", the A3 machines' H100 SXM);
//   - marketplaces' listings of 48 GB RTX 4090 boards ("RTX 4090 48GB").
//
// A renter's spelling that is also a family's name, once Key drops the
// vendor ("NVIDIA H200" is "H200"), names the family, which holds the
// model; an offer's group so named is the model (CanonicalFor).
//
// want is the model's ID, "family:F" for a family, or IDs joined by "|"
// for a group; mem is the memory the spelling constrains to (GB, 0: any).
var spellings = []struct {
	spelling, want string
	mem            uint32
}{
	// NVML names: data centre.
	{"Tesla V100-SXM2-16GB", "V100 SXM2 16GB", 0}, {"Tesla V100-SXM2-32GB", "V100 SXM2 32GB", 0}, {"Tesla V100-PCIE-16GB", "V100 PCIe 16GB", 0},
	{"Tesla V100-PCIE-32GB", "V100 PCIe 32GB", 0}, {"Tesla V100S-PCIE-32GB", "V100S PCIe 32GB", 0}, {"Tesla V100-SXM3-32GB", "V100 SXM3 32GB", 0},
	{"Tesla T4", "T4", 0}, {"NVIDIA A2", "A2", 0}, {"NVIDIA A10", "A10", 0}, {"NVIDIA A10G", "A10G", 0}, {"NVIDIA A16", "A16", 0},
	{"NVIDIA A30", "A30", 0}, {"NVIDIA A30-PCIE-24GB", "A30", 0}, {"NVIDIA A40", "A40", 0},
	{"NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 0}, {"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 0}, {"NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 0},
	{"NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 0}, {"NVIDIA A100-PCIE-80GB", "A100 PCIe 80GB", 0}, {"A100-SXM4-40GB", "A100 SXM 40GB", 0},
	{"NVIDIA A800-SXM4-80GB", "A800 SXM 80GB", 0}, {"NVIDIA A800 80GB PCIe", "A800 PCIe 80GB", 0},
	{"NVIDIA H100 80GB HBM3", "H100 SXM", 0}, {"NVIDIA H100 PCIe", "H100 PCIe", 0}, {"NVIDIA H100 NVL", "H100 NVL", 0},
	{"NVIDIA H800", "family:H800", 0}, {"NVIDIA H800 PCIe", "H800 PCIe", 0}, {"NVIDIA H20", "H20", 0},
	{"NVIDIA H200", "family:H200", 0}, {"NVIDIA H200 141GB HBM3e", "H200 SXM", 0}, {"NVIDIA H200 NVL", "H200 NVL", 0},
	{"NVIDIA GH200 480GB", "GH200 96GB", 0}, {"NVIDIA GH200 120GB", "GH200 96GB", 0}, {"NVIDIA GH200 144G HBM3e", "GH200 144GB", 0},
	{"NVIDIA B200", "B200", 0}, {"NVIDIA B200 180GB HBM3e", "B200", 0}, {"NVIDIA GB200", "GB200", 0},
	{"NVIDIA L4", "L4", 0}, {"NVIDIA L40", "L40", 0}, {"NVIDIA L40S", "L40S", 0}, {"NVIDIA L20", "L20", 0},
	{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell Server", 0},
	// NVML names: workstation.
	{"NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell", 0},
	{"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Max-Q", 0},
	{"NVIDIA RTX PRO 5000 Blackwell", "RTX PRO 5000 Blackwell", 0}, {"NVIDIA RTX PRO 4500 Blackwell", "RTX PRO 4500 Blackwell", 0},
	{"NVIDIA RTX PRO 4000 Blackwell", "family:RTX PRO 4000 Blackwell", 0}, {"NVIDIA RTX PRO 4000 Blackwell SFF Edition", "RTX PRO 4000 Blackwell SFF", 0},
	{"NVIDIA RTX PRO 2000 Blackwell", "RTX PRO 2000 Blackwell", 0},
	{"Quadro RTX 4000", "Quadro RTX 4000", 0}, {"Quadro RTX 5000", "Quadro RTX 5000", 0}, {"Quadro RTX 6000", "Quadro RTX 6000", 0}, {"Quadro RTX 8000", "Quadro RTX 8000", 0},
	{"NVIDIA RTX A2000", "family:RTX A2000", 0}, {"NVIDIA RTX A2000 12GB", "RTX A2000 12GB", 0}, {"NVIDIA RTX A4000", "RTX A4000", 0}, {"NVIDIA RTX A4500", "RTX A4500", 0},
	{"NVIDIA RTX A5000", "RTX A5000", 0}, {"NVIDIA RTX A5500", "RTX A5500", 0}, {"NVIDIA RTX A6000", "RTX A6000", 0}, {"RTX A6000", "RTX A6000", 0},
	{"NVIDIA RTX 2000 Ada Generation", "RTX 2000 Ada", 0}, {"NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", 0},
	{"NVIDIA RTX 4000 SFF Ada Generation", "RTX 4000 SFF Ada", 0}, {"NVIDIA RTX 4500 Ada Generation", "RTX 4500 Ada", 0},
	{"NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada", 0}, {"NVIDIA RTX 5880 Ada Generation", "RTX 5880 Ada", 0}, {"NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 0},
	// NVML names: consumer.
	{"NVIDIA GeForce GTX 1080 Ti", "GTX 1080 Ti", 0}, {"NVIDIA TITAN V", "TITAN V", 0}, {"NVIDIA TITAN RTX", "TITAN RTX", 0},
	{"NVIDIA GeForce RTX 2060", "RTX 2060", 0}, {"NVIDIA GeForce RTX 2060 SUPER", "RTX 2060 SUPER", 0}, {"NVIDIA GeForce RTX 2070 SUPER", "RTX 2070 SUPER", 0},
	{"NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti", 0}, {"GeForce RTX 2080 Ti", "RTX 2080 Ti", 0}, {"NVIDIA GeForce RTX 3050", "RTX 3050", 0},
	{"NVIDIA GeForce RTX 3060", "RTX 3060", 0}, {"NVIDIA GeForce RTX 3060 Ti", "RTX 3060 Ti", 0}, {"NVIDIA GeForce RTX 3070 Ti", "RTX 3070 Ti", 0},
	{"NVIDIA GeForce RTX 3080", "RTX 3080", 0}, {"NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti", 0}, {"NVIDIA GeForce RTX 3090", "RTX 3090", 0},
	{"NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti", 0}, {"NVIDIA GeForce RTX 4060", "RTX 4060", 0}, {"NVIDIA GeForce RTX 4060 Ti", "RTX 4060 Ti", 0},
	{"NVIDIA GeForce RTX 4070", "RTX 4070", 0}, {"NVIDIA GeForce RTX 4070 SUPER", "RTX 4070 SUPER", 0}, {"NVIDIA GeForce RTX 4070 Ti SUPER", "RTX 4070 Ti SUPER", 0},
	{"NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER", 0}, {"NVIDIA GeForce RTX 4090", "RTX 4090", 0}, {"NVIDIA GeForce RTX 4090 D", "RTX 4090 D", 0},
	{"NVIDIA GeForce RTX 5060 Ti", "RTX 5060 Ti", 0}, {"NVIDIA GeForce RTX 5070 Ti", "RTX 5070 Ti", 0}, {"NVIDIA GeForce RTX 5080", "RTX 5080", 0},
	{"NVIDIA GeForce RTX 5090", "RTX 5090", 0}, {"Mock NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 0},
	// Kubernetes GPU feature discovery's nvidia.com/gpu.product.
	{"NVIDIA-A100-SXM4-80GB", "A100 SXM 80GB", 0}, {"NVIDIA-A100-PCIE-40GB", "A100 PCIe 40GB", 0}, {"NVIDIA-H100-80GB-HBM3", "H100 SXM", 0},
	{"NVIDIA-H100-PCIe", "H100 PCIe", 0}, {"NVIDIA-H100-NVL", "H100 NVL", 0}, {"Tesla-T4", "T4", 0}, {"Tesla-V100-SXM2-16GB", "V100 SXM2 16GB", 0},
	{"NVIDIA-L4", "L4", 0}, {"NVIDIA-L40S", "L40S", 0}, {"NVIDIA-A10G", "A10G", 0}, {"NVIDIA-GeForce-RTX-4090", "RTX 4090", 0},
	{"NVIDIA-GeForce-RTX-3090", "RTX 3090", 0}, {"NVIDIA-RTX-A6000", "RTX A6000", 0}, {"NVIDIA-RTX-6000-Ada-Generation", "RTX 6000 Ada", 0},
	{"NVIDIA-H200", "family:H200", 0}, {"NVIDIA-B200", "B200", 0}, {"NVIDIA-GH200-480GB", "GH200 96GB", 0},
	// RunPod's display names.
	{"A100 PCIe", "A100 PCIe 40GB|A100 PCIe 80GB", 0}, {"A100 SXM", "A100 SXM 40GB|A100 SXM 80GB", 0}, {"H100 SXM", "H100 SXM", 0},
	{"H100 PCIe", "H100 PCIe", 0}, {"H100 NVL", "H100 NVL", 0}, {"H200 SXM", "H200 SXM", 0}, {"RTX 6000 Ada", "RTX 6000 Ada", 0},
	{"RTX 5000 Ada", "RTX 5000 Ada", 0}, {"RTX 4000 Ada", "family:RTX 4000 Ada", 0}, {"RTX 2000 Ada", "RTX 2000 Ada", 0},
	{"RTX PRO 6000", "family:RTX PRO 6000 Blackwell", 0}, {"RTX A5000", "RTX A5000", 0}, {"RTX A4500", "RTX A4500", 0},
	{"L40S", "L40S", 0}, {"RTX 4090", "RTX 4090", 0}, {"RTX 5090", "RTX 5090", 0}, {"RTX 3090", "RTX 3090", 0}, {"B200", "B200", 0},
	// Vast.ai's gpu_name values.
	{"Q RTX 4000", "Quadro RTX 4000", 0}, {"Q RTX 5000", "Quadro RTX 5000", 0}, {"Q RTX 6000", "Quadro RTX 6000", 0}, {"Q RTX 8000", "Quadro RTX 8000", 0},
	{"Q_RTX_8000", "Quadro RTX 8000", 0}, {"RTX 2060S", "RTX 2060 SUPER", 0}, {"RTX 2070S", "RTX 2070 SUPER", 0}, {"RTX 2080S", "RTX 2080 SUPER", 0},
	{"RTX 4070S", "RTX 4070 SUPER", 0}, {"RTX 4070S Ti", "RTX 4070 Ti SUPER", 0}, {"RTX 4080S", "RTX 4080 SUPER", 0}, {"RTX_4070S_Ti", "RTX 4070 Ti SUPER", 0},
	{"A100 PCIE", "A100 PCIe 40GB|A100 PCIe 80GB", 0}, {"A100 SXM4", "A100 SXM 40GB|A100 SXM 80GB", 0}, {"A100_SXM4", "A100 SXM 40GB|A100 SXM 80GB", 0},
	{"A800 PCIE", "A800 PCIe 80GB", 0}, {"H100 PCIE", "H100 PCIe", 0}, {"H100_SXM", "H100 SXM", 0}, {"H200", "family:H200", 0},
	{"H200 NVL", "H200 NVL", 0}, {"GH200 SXM", "GH200 96GB|GH200 144GB", 0}, {"Tesla V100", "family:V100", 0}, {"Tesla T4", "T4", 0},
	{"RTX 6000Ada", "RTX 6000 Ada", 0}, {"RTX 5000Ada", "RTX 5000 Ada", 0}, {"RTX 4000Ada", "family:RTX 4000 Ada", 0}, {"RTX 5880Ada", "RTX 5880 Ada", 0},
	{"RTX PRO 6000 WS", "RTX PRO 6000 Blackwell", 0}, {"RTX PRO 6000 S", "RTX PRO 6000 Blackwell Server", 0}, {"RTX PRO 5000", "RTX PRO 5000 Blackwell", 0},
	{"RTX PRO 4000", "family:RTX PRO 4000 Blackwell", 0}, {"RTX PRO 4500", "RTX PRO 4500 Blackwell", 0}, {"RTX A4000", "RTX A4000", 0},
	{"RTX A2000", "family:RTX A2000", 0}, {"RTX 3060 Ti", "RTX 3060 Ti", 0}, {"RTX 4060 Ti", "RTX 4060 Ti", 0}, {"RTX 5060 Ti", "RTX 5060 Ti", 0},
	{"RTX 3080 Ti", "RTX 3080 Ti", 0}, {"RTX 5070", "RTX 5070", 0}, {"GTX 1080 Ti", "GTX 1080 Ti", 0}, {"A40", "A40", 0}, {"L4", "L4", 0},
	// Google Cloud's accelerator types.
	{"nvidia-tesla-t4", "T4", 0}, {"nvidia-tesla-v100", "family:V100", 0}, {"nvidia-l4", "L4", 0}, {"nvidia-h100-80gb", "H100 SXM", 0},
	{"nvidia-h200-141gb", "H200 SXM", 0}, {"nvidia-a100-80gb", "family:A100", 80}, {"nvidia-b200", "B200", 0}, {"nvidia-tesla-a100", "family:A100", 0},
	// Renters' spellings.
	{"4090", "RTX 4090", 0}, {"rtx-4090", "RTX 4090", 0}, {"RTX4090", "RTX 4090", 0}, {"h100-80gb", "H100 SXM", 0}, {"a100-sxm4-80gb", "A100 SXM 80GB", 0},
	{"l40s", "L40S", 0}, {"rtx a6000", "RTX A6000", 0}, {"A6000", "RTX A6000", 0}, {"h100", "family:H100", 0}, {"a100", "family:A100", 0},
	{"RTX PRO 6000 Blackwell", "family:RTX PRO 6000 Blackwell", 0}, {"Quadro RTX 8000", "Quadro RTX 8000", 0}, {"RTX 8000", "Quadro RTX 8000", 0},
	{"4070 Ti SUPER", "RTX 4070 Ti SUPER", 0}, {"2080 SUPER", "RTX 2080 SUPER", 0},
	// Memory sizes, which constrain memory.
	{"RTX 4090 24GB", "RTX 4090", 24}, {"RTX 4090 48GB", "RTX 4090", 48}, {"RTX 4090 48 GB", "RTX 4090", 48}, {"RTX 5060 Ti 16GB", "RTX 5060 Ti", 16},
	{"RTX 5060 Ti 8GB", "RTX 5060 Ti", 8}, {"RTX 4060 Ti 16GB", "RTX 4060 Ti", 16}, {"RTX 3060 12GB", "RTX 3060", 12}, {"RTX 3060 8GB", "RTX 3060", 8},
	{"RTX 3080 12GB", "RTX 3080", 12}, {"RTX 2060 12GB", "RTX 2060", 12}, {"A100 80GB", "family:A100", 80}, {"A100 40GB", "family:A100", 40},
	{"A100 PCIE 80GB", "A100 PCIe 80GB", 0}, {"A100 SXM4 40GB", "A100 SXM 40GB", 0}, {"H100 80GB", "H100 SXM", 0}, {"H100 NVL 94GB", "H100 NVL", 0},
	{"RTX PRO 5000 Blackwell 72GB", "RTX PRO 5000 Blackwell", 72}, {"RTX A6000 48GB", "RTX A6000", 48}, {"Tesla V100 32GB", "family:V100", 32},
	{"Q RTX 8000 48GB", "Quadro RTX 8000", 48}, {"RTX 6000Ada 48GB", "RTX 6000 Ada", 48},
	// Board and superchip totals name the model and no memory.
	{"A16 64GB", "A16", 0}, {"GH200 480GB", "GH200 96GB", 0},
}

// Every spelling in the table resolves to what it names, with the
// memory it names, and resolves so again from the name a bid carries.
func TestSpellingsResolve(t *testing.T) {
	if len(spellings) < 150 {
		t.Fatalf("%d spellings; the table holds at least 150", len(spellings))
	}
	c := gpus.Default()
	for _, tc := range spellings {
		w, err := c.Resolve(tc.spelling)
		if err != nil {
			t.Errorf("Resolve(%q): %v; want %s", tc.spelling, err, tc.want)
			continue
		}
		got := strings.Join(w.Models, "|")
		if w.Family != "" {
			got = "family:" + w.Family
		}
		if got != tc.want || w.MemoryGB != tc.mem {
			t.Errorf("Resolve(%q) = %s, %d GB; want %s, %d GB", tc.spelling, got, w.MemoryGB, tc.want, tc.mem)
		}
		again, err := c.Resolve(w.Name)
		if err != nil || !slices.Equal(again.Models, w.Models) || again.MemoryGB != w.MemoryGB || again.Name != w.Name {
			t.Errorf("Resolve(%q) = %+v, but its name resolves to %+v, %v", tc.spelling, w, again, err)
		}
	}
}

// Names that name no catalog model stay unknown: other vendors' cards,
// cards older than the catalog, and spellings that could mean two.
func TestNothingResolvesWrongly(t *testing.T) {
	c := gpus.Default()
	for _, s := range []string{"InstinctMI50", "AMD Instinct MI300X OAM", "Radeon VII", "Quadro K2200", "GTX 1660 S", "GTX 1660 Ti", "P104-100",
		"GTX TITAN X", "Tesla P100", "Tesla K80", "nvidia-tesla-p100", "RTX 6000", "RTX 4099", "A100X", "H100 48GB SXM9", "RTX 4090 Ti", "RTX 3060 Laptop GPU"} {
		if w, err := c.Resolve(s); err == nil {
			t.Errorf("Resolve(%q) = %+v; want unknown", s, w)
		}
	}
	// "RTX 6000" could be the Quadro or the Ada card: both are suggested.
	var u *gpus.UnknownModelError
	if _, err := c.Resolve("RTX 6000"); !errors.As(err, &u) || !slices.Contains(u.Suggest, "Quadro RTX 6000") || !slices.Contains(u.Suggest, "RTX 6000 Ada") {
		t.Errorf("Resolve(RTX 6000): %v; want both RTX 6000 cards suggested", err)
	}
}

// "Did you mean" stays within the series typed: by loose name, memory
// left out, the longer shared beginning first.
func TestDidYouMeanStaysInTheSeries(t *testing.T) {
	c := gpus.Default()
	for spelling, first := range map[string]string{
		"RTX 4095 48GB": "RTX 4090", "RTX 4099": "RTX 4090", "RTX PRO 6500": "RTX PRO 6000 Blackwell", "H110": "H100", "A6001": "RTX A6000",
		"RTX 5060 Tii 16GB": "RTX 5060 Ti",
	} {
		_, err := c.Resolve(spelling)
		var u *gpus.UnknownModelError
		if !errors.As(err, &u) || len(u.Suggest) == 0 || u.Suggest[0] != first {
			t.Errorf("Resolve(%q): %v; want %q suggested first", spelling, err, first)
		}
	}
}

// An offer's group is called by the model its name and memory name:
// one model of a loose name by its memory, a family where several fit.
func TestCanonicalForTellsModelsApartByMemory(t *testing.T) {
	c := gpus.Default()
	for _, tc := range []struct {
		name string
		vram uint64
		want string
	}{
		{"A100 PCIE", 80 << 30, "A100 PCIe 80GB"}, {"A100 SXM4", 40 << 30, "A100 SXM 40GB"}, {"A100 SXM4", 0, "A100"},
		{"Tesla V100", 32 << 30, "V100"}, {"Tesla V100", 16 << 30, "V100"}, {"H100", 94 << 30, "H100 NVL"}, {"H100", 80 << 30, "H100"},
		{"Q RTX 8000", 46068 << 20, "Quadro RTX 8000"}, {"RTX 4070S Ti", 16 << 30, "RTX 4070 Ti SUPER"}, {"GH200 SXM", 144 << 30, "GH200 144GB"},
		{"RTX PRO 6000", 96 << 30, "RTX PRO 6000 Blackwell"}, {" Foo  9 ", 24 << 30, "Foo 9"},
	} {
		if got := c.CanonicalFor(tc.name, tc.vram); got != tc.want {
			t.Errorf("CanonicalFor(%q, %d GiB) = %q, want %q", tc.name, tc.vram>>30, got, tc.want)
		}
	}
}
