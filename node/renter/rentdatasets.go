package renter

import (
	"context"
	"errors"
	"fmt"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Datasets is what a renter knows of the datasets its node keeps.
type Datasets interface {
	// Bytes is the bytes of the dataset id (a CID) kept here;
	// ErrDatasetNotKept when it is not.
	Bytes(ctx context.Context, id string) (int64, error)
	// Sealed is the key of the dataset id sealed to peer to, which alone
	// opens it; nil for a dataset not encrypted.
	Sealed(ctx context.Context, id string, to peer.ID) ([]byte, error)
}

// ErrDatasetNotKept is a dataset this node does not keep.
var ErrDatasetNotKept = errors.New("not kept here")

// needsOf is what a bid says of the datasets mounted.
func needsOf(ms []*pb.DatasetMount) []*pb.DatasetNeed {
	var out []*pb.DatasetNeed
	for _, m := range ms {
		out = append(out, &pb.DatasetNeed{Cid: m.Cid, Bytes: m.Bytes})
	}
	return out
}

// Needs is what a bid says of the datasets ids (CIDs) kept: their bytes.
func Needs(ctx context.Context, kept Datasets, ids []string) ([]*pb.DatasetNeed, error) {
	var out []*pb.DatasetNeed
	for i, id := range ids {
		n, err := kept.Bytes(ctx, id)
		switch {
		case errors.Is(err, ErrDatasetNotKept):
			return nil, fault.Invalidf("datasets[%d]: %s is not kept here; add it first with 'idlegrid dataset add PATH'", i, id)
		case err != nil:
			return nil, fmt.Errorf("datasets[%d] %s: %w", i, id, err)
		}
		out = append(out, &pb.DatasetNeed{Cid: id, Bytes: uint64(n)})
	}
	return out, nil
}

// mounts are the lease's datasets of a rental's: each kept here, so that
// this node serves it while the provider stages it, with its bytes, and
// the key of an encrypted one sealed to provider (none when empty).
func (r *Renter) mounts(ctx context.Context, dss []api.DatasetMount, provider peer.ID) ([]*pb.DatasetMount, error) {
	if len(dss) == 0 {
		return nil, nil
	}
	if r.Datasets == nil {
		return nil, fault.Invalidf("datasets: this node keeps no datasets")
	}
	out := make([]*pb.DatasetMount, 0, len(dss))
	for i, d := range dss {
		n, err := r.Datasets.Bytes(ctx, d.CID)
		switch {
		case errors.Is(err, ErrDatasetNotKept):
			return nil, fault.Invalidf("datasets[%d].cid: %s is not kept here; add it first with 'idlegrid dataset add PATH'", i, d.CID)
		case err != nil:
			return nil, fmt.Errorf("datasets[%d] %s: %w", i, d.CID, err)
		}
		m := &pb.DatasetMount{Cid: d.CID, Bytes: uint64(n), Path: d.Path}
		if provider != "" {
			if m.SealedKey, err = r.Datasets.Sealed(ctx, d.CID, provider); err != nil {
				return nil, fmt.Errorf("datasets[%d] %s: sealing its key to %s: %w", i, d.CID, provider, err)
			}
		}
		out = append(out, m)
	}
	if err := market.ValidateDatasets(out); err != nil {
		return nil, fault.Invalid(err)
	}
	return out, nil
}
