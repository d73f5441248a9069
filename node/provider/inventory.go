package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
)

// SourceOf opens the provider's GPU source, or nil for a static list.
// A fake machine's GPUs are derived from seed (the node's peer ID), so a
// restarted provider finds the GPUs its stored leases name.
func SourceOf(p config.ProviderConfig, seed string) (attest.GPUSource, error) {
	switch {
	case p.GPUSource == "nvml":
		return attest.OpenNVML(""), nil
	case strings.HasPrefix(p.GPUSource, "fake:"):
		return attest.NewFakeSeeded(strings.TrimPrefix(p.GPUSource, "fake:"), seed)
	}
	return nil, nil
}

// readSellable reads the source and returns the sellable groups, with
// the inventory they came from and why each GPU left out is.
func (p *Provider) readSellable(ctx context.Context) ([]config.GPUConfig, *attest.Inventory, []string, error) {
	inv, err := p.source.Inventory(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if inv.Unavailable != "" {
		return nil, nil, nil, fmt.Errorf("no GPUs to sell: %s", inv.Unavailable)
	}
	groups, why := offer.Sellable(p.Config(), inv)
	if len(why) > 0 {
		p.log.Debug("GPUs held back", "why", why)
	}
	return groups, &inv, why, nil
}
