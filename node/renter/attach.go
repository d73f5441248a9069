package renter

import (
	"context"
	"errors"
	"time"

	ds "github.com/ipfs/go-datastore"

	"github.com/idlegrid/idlegrid/market/pb"
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
	_, l, cs, err := r.rented(ctx, id)
	if err != nil {
		return res, err
	}
	out.last = new(string)
	f := newFollow(r, l, cs, nil, out)
	f.detachOnCancel = true
	release, err := r.takeOver(ctx, f, (*Follow).leaveNow)
	if err != nil {
		return res, err
	}
	defer release()
	// Read again: a follow that handed the lease over wrote it last.
	if f.rec, err = r.Store.Get(ctx, id); err != nil {
		return res, err
	}
	if records.Ended(f.rec.State) {
		return asStored(res, f.rec), nil
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

// takeOver makes f the one follow of its lease: a follow that has it is
// told to let go (handOver: leave it running, or cancel it, which ends it)
// and waited for. The caller reads the lease again afterwards: the
// follow that let go wrote it last.
func (r *Renter) takeOver(ctx context.Context, f *Follow, handOver func(*Follow)) (release func(), err error) {
	for {
		release, ok := r.claim(f)
		if ok {
			return release, nil
		}
		r.mu.Lock()
		other := r.following[f.Lease.Id]
		r.mu.Unlock()
		if other != nil {
			handOver(other)
			select {
			case <-other.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		select { // its owner lets go of it once it has read the end
		case <-r.Clock.After(10 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// rented reads lease id, which this node must have rented.
func (r *Renter) rented(ctx context.Context, id string) (*records.Lease, *pb.Lease, *pb.CoSigned, error) {
	rec, err := r.Store.Get(ctx, id)
	switch {
	case errors.Is(err, ds.ErrNotFound) || err == nil && rec.Role != records.Renter:
		return nil, nil, nil, fault.NotFoundf("lease %q: not one this node rented", id)
	case err != nil:
		return nil, nil, nil, err
	}
	l, cs, err := rec.Open()
	return rec, l, cs, err
}

// asStored is a rental's result as rec stands: the lease, and its
// receipt if it has one.
func asStored(res api.RentResult, rec *records.Lease) api.RentResult {
	res.Lease = views.Lease(rec)
	if rc, rcs, err := rec.OpenReceipt(); err == nil && rc != nil {
		res.Receipt = views.Receipt(rc, rcs)
	}
	return res
}
