package renter

import (
	"context"
	"errors"

	ds "github.com/ipfs/go-datastore"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Attach follows a lease this node rented and has not seen end (one left
// running by rent's Detach, or by a rent that was killed) from where its
// kept output ends: output, telemetry and at the end the receipt, as
// Rent does. The end of ctx leaves the lease running (detached again)
// rather than cancelling it. A lease already ended gets its result at
// once. A follow this node runs of the lease already (resumed after a
// restart) hands the lease over.
func (r *Renter) Attach(ctx context.Context, id string, out RentOutput) (api.RentResult, error) {
	res := api.RentResult{Tried: []api.Attempt{}}
	done, err := r.use()
	if err != nil {
		return res, err
	}
	defer done()
	rec, err := r.Store.Get(ctx, id)
	switch {
	case errors.Is(err, ds.ErrNotFound) || err == nil && rec.Role != records.Renter:
		return res, fault.NotFoundf("lease %q: not one this node rented", id)
	case err != nil:
		return res, err
	}
	l, cs, err := rec.Open()
	if err != nil {
		return res, err
	}
	out.last = new(string)
	f := newFollow(r, l, cs, nil, out)
	f.detachOnCancel = true
	for {
		release, ok := r.claim(f)
		if ok {
			defer release()
			break
		}
		r.mu.Lock()
		other := r.following[id]
		r.mu.Unlock()
		if other != nil {
			other.leaveNow()
			select {
			case <-other.done:
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
	}
	// Read again: a follow that handed the lease over wrote it last.
	if f.rec, err = r.Store.Get(ctx, id); err != nil {
		return res, err
	}
	if records.Ended(f.rec.State) {
		res.Lease = views.Lease(f.rec)
		if rc, rcs, err := f.rec.OpenReceipt(); err == nil && rc != nil {
			res.Receipt = views.Receipt(rc, rcs)
		}
		return res, nil
	}
	if err := f.run(ctx); err != nil {
		return res, err
	}
	res.Lease, res.Receipt, res.Relayed, res.Detached = views.Lease(f.rec), f.receipt, f.relayed, f.left
	if !f.left {
		res.Downloads = r.downloadAll(ctx, peer.ID(l.Provider), id, f.rec.Downloads, out)
	}
	return res, nil
}
