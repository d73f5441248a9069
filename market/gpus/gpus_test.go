package gpus_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/gpus"
)

func TestTheShippedCatalogParses(t *testing.T) {
	ms := gpus.Default().Models()
	seg := map[string]int{}
	for _, m := range ms {
		seg[m.Segment]++
		if m.MemoryGB == 0 || m.ComputeCapability < 60 || m.Architecture == "" {
			t.Errorf("%s: %+v", m.ID, m)
		}
	}
	if len(ms) < 80 || seg["datacenter"] < 25 || seg["workstation"] < 15 || seg["consumer"] < 30 {
		t.Errorf("%d models, by segment %v", len(ms), seg)
	}
}

// Every name NVML gives real cards (and go-nvml's mock machines) names
// its own model, never a family's first word.
func TestNVMLNamesNameTheirModel(t *testing.T) {
	c := gpus.Default()
	for name, want := range map[string]string{
		// go-nvml's mock machines
		"Mock NVIDIA A100-SXM4-40GB": "A100 SXM 40GB", "NVIDIA H100 80GB HBM3": "H100 SXM",
		"NVIDIA H200 141GB HBM3e": "H200 SXM", "NVIDIA B200 180GB HBM3e": "B200",
		"NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB", "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB", "NVIDIA A30-PCIE-24GB": "A30",
		// data centre
		"NVIDIA H100 PCIe": "H100 PCIe", "NVIDIA H100 NVL": "H100 NVL", "NVIDIA H200": "H200 SXM", "NVIDIA B200": "B200",
		"NVIDIA A100 80GB PCIe": "A100 PCIe 80GB", "Tesla V100-SXM2-16GB": "V100 SXM2 16GB", "Tesla T4": "T4",
		"NVIDIA A10G": "A10G", "NVIDIA A10": "A10", "NVIDIA L4": "L4", "NVIDIA L40S": "L40S", "NVIDIA GH200 480GB": "GH200 96GB",
		// workstation
		"NVIDIA RTX A6000": "RTX A6000", "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
		"NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX PRO 6000 Blackwell", "Quadro RTX 8000": "Quadro RTX 8000",
		// consumer
		"NVIDIA GeForce RTX 4090": "RTX 4090", "NVIDIA GeForce RTX 5060 Ti": "RTX 5060 Ti", "NVIDIA GeForce RTX 5080": "RTX 5080",
		"NVIDIA GeForce RTX 3090": "RTX 3090", "GeForce RTX 2080 Ti": "RTX 2080 Ti", "NVIDIA GeForce RTX 5090": "RTX 5090",
	} {
		if got := c.ModelName(name, 0); got != want {
			t.Errorf("ModelName(%q) = %q, want %q", name, got, want)
		}
	}
}

// A renter's spelling of a model names the model; a family's name every
// model of the family; anything else is an error with the nearest names.
func TestResolveReadsWhatRentersWrite(t *testing.T) {
	c := gpus.Default()
	for spelling, want := range map[string]string{
		"4090": "RTX 4090", "RTX 4090": "RTX 4090", "rtx-4090": "RTX 4090", "rtx4090": "RTX 4090", "GeForce RTX 4090": "RTX 4090",
		"NVIDIA GeForce RTX 4090": "RTX 4090", "RTX4090": "RTX 4090", "5060 Ti": "RTX 5060 Ti", "rtx 5060ti": "RTX 5060 Ti",
		"H100 SXM": "H100 SXM", "h100-sxm5": "H100 SXM", "h100-80gb": "H100 SXM", "H100 NVL": "H100 NVL", "a100-sxm4-80gb": "A100 SXM 80GB",
		"RTX 6000 Ada Generation": "RTX 6000 Ada", "rtx a6000": "RTX A6000", "l40s": "L40S",
	} {
		w, err := c.Resolve(spelling)
		if err != nil || len(w.Models) != 1 || w.Models[0] != want {
			t.Errorf("Resolve(%q) = %+v, %v; want the model %s", spelling, w, err, want)
		}
	}
	for spelling, want := range map[string][]string{
		"H100": {"H100 SXM", "H100 PCIe", "H100 NVL"}, "a100": {"A100 SXM 80GB", "A100 SXM 40GB", "A100 PCIe 80GB", "A100 PCIe 40GB"},
	} {
		w, err := c.Resolve(spelling)
		if err != nil || w.Family == "" {
			t.Errorf("Resolve(%q) = %+v, %v; want a family", spelling, w, err)
			continue
		}
		for _, m := range want {
			if !slices.Contains(w.Models, m) {
				t.Errorf("Resolve(%q) = %v: no %s", spelling, w.Models, m)
			}
		}
	}
	for spelling, suggest := range map[string]string{"RTX 4099": "RTX 4090", "H10": "H100", "A6000x": "RTX A6000", "rtx 509": "RTX 5090"} {
		_, err := c.Resolve(spelling)
		var u *gpus.UnknownModelError
		if !errors.As(err, &u) || !slices.Contains(u.Suggest, suggest) || !strings.Contains(err.Error(), "did you mean") {
			t.Errorf("Resolve(%q) = %v; want an error suggesting %s", spelling, err, suggest)
		}
	}
	if _, err := c.Resolve("quantum toaster"); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a name near nothing: %v", err)
	}
	// A bid's entries expand to the IDs offers carry, and a family to
	// its own name too, for groups listed by hand as "A100".
	got := c.Expand([]string{"H100", "4090", "H100 SXM", "Foo 9", "RTX 4090 48GB"})
	for _, a := range []gpus.Accept{{Model: "H100 SXM"}, {Model: "H100 PCIe"}, {Model: "H100 NVL"}, {Model: "H100"}, {Model: "RTX 4090"}, {Model: "Foo 9", Kind: "foo9"},
		{Model: "RTX 4090", MemoryBytes: 48 << 30}} {
		if !slices.Contains(got, a) {
			t.Errorf("Expand: %v lacks %+v", got, a)
		}
	}
	if len(got) != 7 {
		t.Errorf("Expand repeats: %v", got)
	}
}

// A card is sold by its marketed memory: the 24 GB a 4090 is sold as is
// what a bid for 24 GB sees, though NVML reports 23.99 GiB.
func TestMarketedMemory(t *testing.T) {
	c := gpus.Default()
	const mib = 1 << 20
	for _, tc := range []struct {
		model    string
		reported uint64
		want     uint64
	}{
		{"RTX 4090", 24564 * mib, 24 << 30},
		{"H100 SXM", 81559 * mib, 80 << 30},
		{"H200 SXM", 143771 * mib, 141 << 30},
		{"H100 NVL", 95830 * mib, 94 << 30},
		{"A100 SXM 40GB", 40 << 30, 40 << 30},
		{"RTX 4090", 8 << 30, 8 << 30},                        // far below: not raised
		{"Foo 9", 24564 * mib, 24 << 30},                      // unknown, within 2% of 24 GiB
		{"Foo 9", 22 << 30, 22 << 30},                         // whole
		{"Foo 9", 23*(1<<30) + 100*mib, 24 << 30},             // within a tenth below a size the catalog knows
		{"Foo 9", 21*(1<<30) + 100*mib, 21*(1<<30) + 100*mib}, // more than a tenth below 24: kept
		// ECC on GDDR takes 1/16: one rule for names known and not.
		{"RTX A6000", 46068 * mib, 48 << 30}, // 44.99 GiB
		{"Q RTX 8000", 45 << 30, 48 << 30},
		{"Foo 9", 45 << 30, 48 << 30},
		{"Foo 9", 46068 * mib, 48 << 30},
		{"A10", 23028 * mib, 24 << 30}, // 22.49 GiB
		{"Foo 9", 23028 * mib, 24 << 30},
		{"RTX 4090", 49140 * mib, 48 << 30}, // a 48 GB board of a 24 GB model
		{"RTX 2080 Ti", 11008 * mib, 11 << 30},
		{"RTX 3060", 12288 * mib, 12 << 30},
		{"RTX 3060", 8 << 30, 8 << 30},
	} {
		if got := c.MarketedBytes(tc.model, tc.reported); got != tc.want {
			t.Errorf("MarketedBytes(%s, %d MiB) = %d MiB, want %d MiB", tc.model, tc.reported/mib, got/mib, tc.want/mib)
		}
	}
	if got := gpus.ShowMemory(24 << 30); got != "24 GB" {
		t.Errorf("ShowMemory = %q", got)
	}
}

// A malformed table is refused with the line and the field.
func TestParseRefusesABadTable(t *testing.T) {
	head := "id\tfamily\tarchitecture\tmemory_gb\tmemory_type\tform_factor\tnvlink\tcompute_capability\tsegment\tpci_ids\tnvml_names\taliases\n"
	row := func(id, alias string) string {
		return id + "\tF\tAmpere\t24\tGDDR6\tPCIe\tno\t8.6\tconsumer\t\tNVIDIA " + id + "\t" + alias + "\n"
	}
	for _, tc := range []struct{ tsv, want string }{
		{head + row("X 1", "x-one") + row("X 2", "xone"), `line 3: X 2: the name "xone" is also X 1's`},
		{head + "X 1\tF\n", "line 2: 2 fields; want 12"},
		{head + strings.Replace(row("X 1", ""), "PCIe", "Socket", 1), `line 2: X 1: form_factor "Socket"`},
		{head + strings.Replace(row("X 1", ""), "8.6", "eight", 1), `line 2: X 1: compute_capability "eight"`},
		{strings.Replace(head, "aliases", "names", 1), "line 1: header"},
		{head, "no models"},
	} {
		if _, err := gpus.Parse([]byte(tc.tsv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse: %v; want %q", err, tc.want)
		}
	}
}

// An offer's name for a group is true of a GPU of its model in any
// spelling, or of its family; not of another model of the family.
func TestCovers(t *testing.T) {
	c := gpus.Default()
	for _, tc := range []struct {
		claim, model string
		want         bool
	}{
		{"H100", "H100 SXM", true}, {"h100-sxm5", "H100 SXM", true}, {"H100 PCIe", "H100 SXM", false},
		{"RTX4090", "RTX 4090", true}, {"A100", "H100 SXM", false}, {"Foo 9", "Foo 9", true}, {"Foo", "Foo 9", false},
	} {
		if got := c.Covers(tc.claim, tc.model); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.claim, tc.model, got, tc.want)
		}
	}
}
