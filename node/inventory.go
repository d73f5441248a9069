package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/config"
)

// gpuSource opens the provider's GPU source, or nil for a static list.
// A fake machine's GPUs are derived from seed (the node's peer ID), so a
// restarted provider finds the GPUs its stored leases name.
func gpuSourceOf(p config.ProviderConfig, seed string) (attest.GPUSource, error) {
	switch {
	case p.GPUSource == "nvml":
		return attest.OpenNVML(""), nil
	case strings.HasPrefix(p.GPUSource, "fake:"):
		return attest.NewFakeSeeded(strings.TrimPrefix(p.GPUSource, "fake:"), seed)
	}
	return nil, nil
}

// sellable turns an inventory into the GPU groups this provider may sell
// now: the GPUs provider.share names (all when it is empty) that run no
// compute process, are at most busy_utilization busy, and are below the
// thermal cap. why says, per GPU left out, the reason.
func sellable(p config.ProviderConfig, inv attest.Inventory) (groups []config.GPUConfig, why []string) {
	type key struct {
		model, cc string
		vram      int
	}
	counts := map[key]int{}
	for _, g := range inv.GPUs {
		switch {
		case len(p.Share) > 0 && !slices.Contains(p.Share, g.UUID) && !slices.Contains(p.Share, fmt.Sprint(g.Index)):
			continue
		case len(g.Processes) > 0:
			why = append(why, fmt.Sprintf("GPU %d busy: %d processes", g.Index, len(g.Processes)))
		case g.UtilizationPct > p.BusyUtilization:
			why = append(why, fmt.Sprintf("GPU %d busy: %d%% utilised", g.Index, g.UtilizationPct))
		case p.ThermalCapC > 0 && g.TemperatureC >= p.ThermalCapC:
			why = append(why, fmt.Sprintf("GPU %d at %d°C, cap %d°C", g.Index, g.TemperatureC, p.ThermalCapC))
		default:
			model := attest.ModelOf(g.Name, g.PCIDeviceID)
			counts[key{model, g.ComputeCapability, int(attest.VRAMOf(model, g.MemoryBytes) >> 30)}]++
		}
	}
	for k, n := range counts {
		groups = append(groups, config.GPUConfig{Model: k.model, Count: n, VRAMGiB: k.vram, ComputeCapability: k.cc, Interconnect: ""})
	}
	slices.SortFunc(groups, func(a, b config.GPUConfig) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.VRAMGiB, b.VRAMGiB), cmp.Compare(a.ComputeCapability, b.ComputeCapability))
	})
	return groups, why
}

// readSellable reads the source and returns the sellable groups, with
// the inventory they came from.
func (p *provider) readSellable(ctx context.Context) ([]config.GPUConfig, *attest.Inventory, error) {
	inv, err := p.source.Inventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	if inv.Unavailable != "" {
		return nil, nil, fmt.Errorf("no GPUs to sell: %s", inv.Unavailable)
	}
	groups, why := sellable(p.cfg(), inv)
	if len(why) > 0 {
		p.log.Debug("GPUs held back", "why", why)
	}
	return groups, &inv, nil
}
