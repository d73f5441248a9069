package renter

import (
	"context"
	"errors"
	"io"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/records"
)

// Cancel ends a lease this node rented before its term: the provider
// stops the job, and Cancel waits for the receipt both sides sign, as
// rent and attach do, so that this renter's record of the lease (its
// state, its receipt) agrees with the provider's once Cancel returns. A
// follow of the lease in this node is asked to cancel and delivers the
// receipt; with none, Cancel follows the lease itself, cancelling it as
// soon as it is attached. A provider that cannot be reached leaves the
// lease settling, as a rent whose provider vanished does. ctx bounds the
// wait; the cancellation, once sent, stands.
func (r *Renter) Cancel(ctx context.Context, id string) (api.RentResult, error) {
	res := api.RentResult{Tried: []api.Attempt{}}
	done, err := r.use()
	if err != nil {
		return res, err
	}
	defer done()
	rec, l, cs, err := r.rented(ctx, id)
	switch {
	case err != nil:
		return res, err
	case records.Ended(rec.State):
		return res, fault.Conflictf("lease %s already ended: %s", id, rec.State)
	}
	f := newFollow(r, l, cs, rec, RentOutput{Stdout: io.Discard, Stderr: io.Discard})
	// A settling follow cancels the lease as soon as it is attached.
	f.settling = rec.State == records.Settling
	gaveUp, stop := context.WithCancel(context.WithoutCancel(ctx))
	stop()
	release, err := r.takeOver(ctx, f, (*Follow).cancel)
	if err != nil {
		return res, err
	}
	defer release()
	// Read again: a follow that had the lease wrote it last.
	if f.rec, err = r.Store.Get(ctx, id); err != nil {
		return res, err
	}
	if !records.Ended(f.rec.State) {
		err := f.run(gaveUp)
		if errors.Is(err, errNotBack) {
			err = nil // settling still: the settler tries again
		}
		if err != nil {
			return res, err
		}
	}
	return asStored(res, f.rec), nil
}
