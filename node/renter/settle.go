package renter

import (
	"context"
	"errors"
	"time"

	"github.com/idlegrid/idlegrid/node/records"
)

// settleLoop tries at once, and then every SettleEvery, to settle the
// leases this renter holds settling (their provider was gone), until ctx
// ends: a rent that left one settling and exited has it settled by the
// next node of its repository (the daemon, another rent).
func (r *Renter) settleLoop(ctx context.Context) {
	t := r.Clock.NewTicker(SettleEvery)
	defer t.Stop()
	for {
		r.settleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// settleAll tries once to settle each settling lease that no follow
// holds: attached again, the lease is cancelled (the renter gave it up)
// and ends with the provider's receipt, checked and countersigned, and
// the renter's agreement to the provider's record, as a followed lease
// ends; a provider not reached by the lease's SettleByMs leaves the
// renter's own receipt standing.
func (r *Renter) settleAll(ctx context.Context) {
	// A settling follow cancels the lease as soon as it is attached.
	gaveUp, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	r.followStored(ctx, "settling", func(rec *records.Lease) bool { return rec.State == records.Settling }, func(f *Follow, rec *records.Lease) error {
		f.settling = true
		err := f.run(gaveUp)
		if errors.Is(err, errNotBack) && !r.Clock.Now().Before(time.UnixMilli(rec.SettleByMs)) {
			err = f.settleAlone()
		}
		if errors.Is(err, errNotBack) {
			return nil
		}
		return err
	})
}
