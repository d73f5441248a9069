package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/spf13/cobra"
)

func newGPUsCmd(e *env) *cobra.Command {
	var (
		fake    string
		catalog bool
	)
	c := &cobra.Command{
		Use:   "gpus",
		Short: "Show this machine's GPUs as NVML reads them, or the GPU catalog",
		Long: `Read this machine's NVIDIA GPUs through NVML (libnvidia-ml, opened at run
time): index, UUID, name, memory, compute capability, PCIe link, power limit
and draw, temperature, utilisation, ECC and MIG modes, running processes.
On a machine without the driver it says so and lists none (exit 0).
MODEL is the name offers give the GPU: its canonical ID in the GPU catalog,
found by NVML name or PCI device ID. --fake shows one of go-nvml's mock DGX
machines instead: ` + strings.Join(attest.FakeMachines, ", ") + `.

--catalog lists the catalog instead: every model a bid may name, with its
family (what "--gpu h100" means: any H100), form factor, NVLink, marketed
memory and compute capability. Renters may write any common spelling of a
model ("4090", "rtx-4090", "H100 SXM", "h100-80gb").`,
		Example: `  idlegrid gpus
  idlegrid gpus --fake dgxh100 --json
  idlegrid gpus --catalog`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if catalog {
				return printCatalog(e)
			}
			inv, err := attest.LocalInventory(e.ctx, fake)
			if errors.Is(err, attest.ErrUnknownFake) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(inv)
			}
			if inv.Unavailable != "" {
				fmt.Fprintf(e.stdout, "no GPUs: %s\n", inv.Unavailable)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s: driver %s, CUDA %s, %d GPUs\n", inv.Source, inv.DriverVersion, inv.CUDAVersion, len(inv.GPUs))
			return e.printList(inv.GPUs, len(inv.GPUs), "no GPUs", func(w io.Writer) {
				fmt.Fprintln(w, "#\tUUID\tNAME\tMODEL\tMEMORY\tCC\tPCIE\tPOWER\tTEMP\tUTIL\tECC\tMIG\tPROCS")
				for _, g := range inv.GPUs {
					model := attest.ModelOf(g.Name, g.PCIDeviceID)
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\tgen%d x%d\t%.0f/%.0f W\t%d°C\t%d%%\t%s\t%s\t%d\n",
						g.Index, g.UUID, g.Name, model, gpus.ShowMemory(attest.VRAMOf(model, g.MemoryBytes)), g.ComputeCapability, g.PCIeGeneration, g.PCIeWidth,
						g.PowerDrawWatts, g.PowerLimitWatts, g.TemperatureC, g.UtilizationPct, onOff(g.ECCEnabled), onOff(g.MIGEnabled), len(g.Processes))
				}
			})
		},
	}
	c.Flags().StringVar(&fake, "fake", "", "show a fake machine: "+strings.Join(attest.FakeMachines, ", "))
	c.Flags().BoolVar(&catalog, "catalog", false, "list the GPU catalog: the models and families bids name")
	addJSONFlag(c, e)
	return c
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// catalogModel is one model of the GPU catalog, as --catalog --json
// writes it.
type catalogModel struct {
	ID                string   `json:"id"`
	Family            string   `json:"family"`
	Architecture      string   `json:"architecture"`
	MemoryGB          uint32   `json:"memory_gb"`
	MemoryType        string   `json:"memory_type"`
	FormFactor        string   `json:"form_factor"`
	NVLink            string   `json:"nvlink"`
	ComputeCapability string   `json:"compute_capability"`
	Segment           string   `json:"segment"`
	NVMLNames         []string `json:"nvml_names"`
	Aliases           []string `json:"aliases,omitempty"`
}

func printCatalog(e *env) error {
	var ms []catalogModel
	for _, m := range gpus.Default().Models() {
		ms = append(ms, catalogModel{m.ID, m.Family, m.Architecture, m.MemoryGB, m.MemoryType, m.FormFactor, m.NVLink,
			fmt.Sprintf("%d.%d", m.ComputeCapability/10, m.ComputeCapability%10), m.Segment, m.NVMLNames, m.Aliases})
	}
	if e.asJSON {
		return e.printJSON(ms)
	}
	return e.printList(ms, len(ms), "no models", func(w io.Writer) {
		fmt.Fprintln(w, "MODEL\tFAMILY\tARCHITECTURE\tMEMORY\tFORM\tNVLINK\tCC\tSEGMENT")
		for _, m := range ms {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d GB %s\t%s\t%s\t%s\t%s\n", m.ID, m.Family, m.Architecture, m.MemoryGB, m.MemoryType, m.FormFactor, m.NVLink, m.ComputeCapability, m.Segment)
		}
	})
}
