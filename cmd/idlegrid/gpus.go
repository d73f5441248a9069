package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node"
	"github.com/spf13/cobra"
)

func newGPUsCmd(e *env) *cobra.Command {
	var fake string
	c := &cobra.Command{
		Use:   "gpus",
		Short: "Show this machine's GPUs as NVML reads them",
		Long: `Read this machine's NVIDIA GPUs through NVML (libnvidia-ml, opened at run
time): index, UUID, name, memory, compute capability, PCIe link, power limit
and draw, temperature, utilisation, ECC and MIG modes, running processes.
On a machine without the driver it says so and lists none (exit 0).
--fake shows one of go-nvml's mock DGX machines instead: ` + strings.Join(attest.FakeMachines, ", ") + `.`,
		Example: `  idlegrid gpus
  idlegrid gpus --fake dgxh100 --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			inv, err := node.GPUInventory(e.ctx, fake)
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
				fmt.Fprintln(w, "#\tUUID\tNAME\tMEMORY\tCC\tPCIE\tPOWER\tTEMP\tUTIL\tECC\tMIG\tPROCS")
				for _, g := range inv.GPUs {
					fmt.Fprintf(w, "%d\t%s\t%s\t%d GiB\t%s\tgen%d x%d\t%.0f/%.0f W\t%d°C\t%d%%\t%s\t%s\t%d\n",
						g.Index, g.UUID, g.Name, g.MemoryBytes>>30, g.ComputeCapability, g.PCIeGeneration, g.PCIeWidth,
						g.PowerDrawWatts, g.PowerLimitWatts, g.TemperatureC, g.UtilizationPct, onOff(g.ECCEnabled), onOff(g.MIGEnabled), len(g.Processes))
				}
			})
		},
	}
	c.Flags().StringVar(&fake, "fake", "", "show a fake machine: "+strings.Join(attest.FakeMachines, ", "))
	addJSONFlag(c, e)
	return c
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
