package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/executor"
)

// recover picks up the provider's leases after a restart, the way they
// were left: each lease not ended gets its calendar slots back; a running
// job the executor still has is adopted (and stopped at once if its term
// ended meanwhile); a lease whose job is gone fails, metered up to its
// last persisted beat; a lease not yet started is started. Jobs the
// executor runs for no lease left open are stopped: nothing runs that no
// lease pays for.
func (lm *leaseManager) recover(ctx context.Context) error {
	recs, err := lm.store.all(ctx)
	if err != nil {
		return err
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	now := time.Now()
	for _, rec := range recs {
		if rec.Role != roleProvider || LeaseEnded(rec.State) {
			continue
		}
		l, cs, err := rec.lease()
		if err != nil {
			lm.n.log.Error("stored lease unreadable; left as it is", "lease", rec.ID, "err", err)
			continue
		}
		a := market.Allocation{ID: l.Id, GPUIDs: rec.GPUs, Start: time.UnixMilli(l.StartUnixMs), End: time.UnixMilli(rec.EndMs), Tier: l.Tier, PriceMicros: l.PriceMicros}
		held := false
		for _, c := range lm.cals {
			if c.Restore(a) == nil {
				held = true
				break
			}
		}
		ll := newLive(l, cs, rec)
		var job executor.Job
		if lm.exec != nil {
			job, err = lm.exec.Adopt(ctx, l.Id, executor.Output{Stdout: ll.out.writer(false), Stderr: ll.out.writer(true)})
			if err != nil {
				job = nil
			}
		}
		lost := ""
		switch {
		case !held:
			// Its GPUs are gone from this machine (or the calendar holds
			// the ID twice): kept going, the lease would run on GPUs the
			// calendar could sell again.
			lost = fmt.Sprintf("its GPUs %v are not among this provider's any more", rec.GPUs)
			lm.n.log.Error("lease's GPUs not found after restart; the lease fails", "lease", l.Id, "gpus", rec.GPUs)
		case job != nil:
		case rec.State == LeaseActive:
			lost = "the job was lost while the provider was down"
		case !now.Before(time.UnixMilli(rec.EndMs)):
			lost = "the lease's term passed while the provider was down"
		case lm.exec == nil:
			lost = "this provider runs no jobs any more (jobs.executor = none)"
		}
		lm.n.log.Info("lease recovered", "lease", l.Id, "state", rec.State, "adopted", job != nil, "lost", lost)
		lm.superviseLocked(ll, job, lost)
	}
	return lm.stopOrphans(ctx)
}

// stopOrphans stops the jobs the executor runs for leases that are not
// live: ended ones, or ones never recorded (a provider killed between
// starting a job and writing it down).
func (lm *leaseManager) stopOrphans(ctx context.Context) error {
	if lm.exec == nil {
		return nil
	}
	ids, err := lm.exec.Running(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if lm.live[id] != nil {
			continue
		}
		job, err := lm.exec.Adopt(ctx, id, executor.Output{})
		if err != nil {
			continue
		}
		lm.n.log.Warn("stopping a job no open lease pays for", "lease", id)
		if err := job.Stop(ctx, lm.n.cfg.Jobs.StopGrace.Std()); err != nil {
			lm.n.log.Warn("orphan job not stopped", "lease", id, "err", err)
		}
	}
	return nil
}

// close waits for the supervisors, which leave containers running for
// the next start to adopt.
func (lm *leaseManager) close() {
	lm.wg.Wait()
	if lm.exec != nil {
		lm.exec.Close()
	}
}

// liveIDs lists the leases supervised now.
func (lm *leaseManager) liveIDs() []string {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	ids := make([]string, 0, len(lm.live))
	for id := range lm.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// slotCounts is how many GPUs each model's calendar holds.
func (lm *leaseManager) slotCounts() map[string]int {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	out := map[string]int{}
	for m, c := range lm.cals {
		out[m] = c.Slots()
	}
	return out
}
