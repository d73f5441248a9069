package lease

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/libp2p/go-libp2p/core/peer"
)

// stageKeep is how long an uploaded tar waits for its lease, and a pack
// of idlegrid cp for its download.
const stageKeep = time.Hour

// leaseLookup bounds how long a download waits to learn whose lease it
// names.
const leaseLookup = 5 * time.Second

// stageRules are the bounds of the provider's stage under j: a renter
// keeps twice the largest tar (uploads and outputs together), all renters
// jobs.max_stage_gib, those with no lease here half of it.
func (lo *Owner) stageRules(j config.JobsConfig, clk clock.Clock) transfer.StageRules {
	max := int64(j.MaxUploadMiB) << 20
	total := int64(j.MaxStageGiB) << 30
	return transfer.StageRules{
		MaxBytes: max, PerRenter: 2 * max, MaxFiles: market.MaxInputs, Keep: stageKeep,
		Total: total, Strangers: total / 2, Leased: lo.leasedRenters,
		PacksFrom: market.MaxOutputs, Clock: clk,
	}
}

// openOutput opens output index of lease for from: only for a lease this
// provider holds, only for its renter, and only from that renter's own
// outputs.
func (lo *Owner) openOutput(ctx context.Context, from peer.ID, lease string, index int) (io.ReadSeekCloser, int64, []byte, error) {
	if err := transfer.CheckLeaseID(lease); err != nil {
		return nil, 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, leaseLookup)
	defer cancel()
	if renter, ok := lo.leaseRenter(ctx, lease); !ok || renter != from {
		return nil, 0, nil, fmt.Errorf("no lease %s of yours here", lease)
	}
	return lo.stage.Output(from, lease, index)
}

// leaseRenter is the renter of lease id, which this provider holds now
// or held; false when it holds no such lease.
func (lo *Owner) leaseRenter(ctx context.Context, id string) (peer.ID, bool) {
	var renter peer.ID
	lo.Do(ctx, func(st *State) {
		if ll := st.Live[id]; ll != nil {
			renter = peer.ID(ll.lease.Renter)
		}
	})
	if renter != "" {
		return renter, true
	}
	rec, err := lo.store.Get(ctx, id)
	if err != nil || rec.Role != records.Provider {
		return "", false
	}
	l, _, err := rec.Open()
	if err != nil || l.Id != id {
		return "", false
	}
	return peer.ID(l.Renter), true
}

// leasedRenters are the renters that hold a lease here now: the stage
// counts their uploads outside the strangers' share.
func (lo *Owner) leasedRenters() []peer.ID {
	ctx, cancel := context.WithTimeout(lo.ctx, leaseLookup)
	defer cancel()
	var out []peer.ID
	lo.Do(ctx, func(st *State) {
		for _, ll := range st.Live {
			out = append(out, peer.ID(ll.lease.Renter))
		}
	})
	return out
}
