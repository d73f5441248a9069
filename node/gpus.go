package node

import (
	"context"

	"github.com/idlegrid/idlegrid/attest"
)

// GPUInventory reads this machine's GPUs through NVML, or, when fake names
// one of attest.FakeMachines, the fake machine built on go-nvml's mocks.
// A machine without a driver gives an empty inventory with the reason.
func GPUInventory(ctx context.Context, fake string) (attest.Inventory, error) {
	if fake != "" {
		src, err := attest.NewFake(fake)
		if err != nil {
			return attest.Inventory{}, err
		}
		return src.Inventory(ctx)
	}
	return attest.OpenNVML("").Inventory(ctx)
}
