package node

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// receiptWait bounds how long a provider waits for the renter to
// countersign a receipt; without it the provider keeps its own signature.
const receiptWait = 10 * time.Second

// spec is what the executor runs for l on the GPUs assigned.
func (lm *leaseManager) spec(l *pb.Lease, gpus []string) executor.Spec {
	j := lm.n.cfg.Jobs
	w := l.Workload
	s := executor.Spec{
		LeaseID: l.Id, Image: w.Image, Command: w.Command,
		Env:         append(append([]string{}, w.Env...), "IDLEGRID_LEASE="+l.Id, "IDLEGRID_GPUS="+strings.Join(gpus, ",")),
		NanoCPUs:    int64(j.CPUs) * 1e9,
		MemoryBytes: int64(j.MemoryGiB) << 30,
		PIDs:        int64(j.PIDs),
	}
	if w.CpuMillis > 0 {
		s.NanoCPUs = int64(w.CpuMillis) * 1e6
	}
	// An engine refuses a limit above the CPUs the machine has.
	s.NanoCPUs = min(s.NanoCPUs, int64(runtime.NumCPU())*1e9)
	if w.MemoryBytes > 0 {
		s.MemoryBytes = int64(w.MemoryBytes)
	}
	if w.Pids > 0 {
		s.PIDs = int64(w.Pids)
	}
	if j.PassGPUs {
		s.GPUs = gpus
	}
	return s
}

// newLive is the live state of a lease about to be supervised.
func newLive(l *pb.Lease, cs *pb.CoSigned, rec *leaseRecord) *liveLease {
	return &liveLease{lease: l, cs: cs, rec: rec, out: newJobOutput(time.Now(), rec.LastEnv), stop: make(chan stopRequest, 1), done: make(chan struct{}), off: make(chan struct{})}
}

// superviseLocked starts the goroutine that runs a lease: adopted is a
// job found after a restart, else nil; a lost reason ends the lease as
// failed at once. lm.mu must be held.
func (lm *leaseManager) superviseLocked(ll *liveLease, adopted executor.Job, lost string) {
	lm.live[ll.lease.Id] = ll
	lm.wg.Add(1)
	go func() {
		defer lm.wg.Done()
		defer close(ll.done)
		lm.supervise(ll, adopted, lost)
	}()
}

// run is one supervisor's view of its job.
type run struct {
	lm      *leaseManager
	ll      *liveLease
	job     executor.Job
	chain   *attest.Chain
	exited  chan int // exit code, once the job has exited
	pending *stopRequest
}

// supervise waits for the lease's start, starts (or adopts) its job,
// meters it with a beat every heartbeat interval, and ends it when the
// job exits, the term ends, a stop is requested or the renter is gone.
// When the node closes it leaves a container running for the restarted
// provider to adopt.
func (lm *leaseManager) supervise(ll *liveLease, adopted executor.Job, lost string) {
	r := &run{lm: lm, ll: ll, job: adopted, exited: make(chan int, 1)}
	var err error
	if r.chain, err = attest.ResumeChain(lm.n.key, ll.lease.Id, ll.rec.Beats, ll.rec.Root, time.UnixMilli(ll.rec.LastBeat)); err != nil {
		lost = "telemetry: " + err.Error()
	}
	if lost != "" {
		r.finish(pb.Outcome_OUTCOME_FAILED, lost, -1)
		return
	}
	if o := ll.rec.StopOutcome; o != 0 {
		r.pending = &stopRequest{outcome: pb.Outcome(o), note: ll.rec.StopNote, at: time.UnixMilli(ll.rec.EndMs)}
	}
	if r.job == nil {
		if !r.waitStart() || !r.waitGPUs() {
			return
		}
		if r.job, err = lm.exec.Start(lm.ctx, lm.spec(ll.lease, ll.rec.GPUs), executor.Output{Stdout: ll.out.writer(false), Stderr: ll.out.writer(true)}); err != nil {
			r.finish(pb.Outcome_OUTCOME_FAILED, "job did not start: "+err.Error(), -1)
			return
		}
	}
	ll.rec.State, ll.rec.Job = LeaseActive, r.job.ID()
	r.persist()
	ll.out.send(&pb.JobFrame{Kind: &pb.JobFrame_Started{Started: fmt.Sprintf("%s job %s on GPUs %v", lm.exec.Name(), r.job.ID(), ll.rec.GPUs)}})
	go func() {
		code, err := r.job.Wait(lm.ctx)
		if err == nil {
			r.exited <- code
		}
	}()
	r.beat()
	r.loop()
}

// waitStart waits for the lease's start; false when it ended first.
func (r *run) waitStart() bool {
	wait := time.NewTimer(time.Until(time.UnixMilli(r.ll.lease.StartUnixMs)))
	defer wait.Stop()
	select {
	case <-wait.C:
		return true
	case s := <-r.ll.stop:
		r.finish(s.outcome, s.note+" before the lease started", -1)
	case <-r.lm.ctx.Done():
	}
	return false
}

// waitGPUs waits until the jobs of the leases that held this lease's GPUs
// before it are gone: a preempted bronze job may still be in its stop
// grace at this lease's start, and two jobs must not share a GPU. The
// wait is bounded by the stop grace and half a minute for the engine;
// false when the node closes first.
func (r *run) waitGPUs() bool {
	lm, l := r.lm, r.ll.lease
	lm.mu.Lock()
	var before []*liveLease
	for id, o := range lm.live {
		if id != l.Id && o.lease.StartUnixMs < l.StartUnixMs && slices.ContainsFunc(o.rec.GPUs, func(g string) bool { return slices.Contains(r.ll.rec.GPUs, g) }) {
			before = append(before, o)
		}
	}
	lm.mu.Unlock()
	limit := time.NewTimer(lm.n.cfg.Jobs.StopGrace.Std() + 30*time.Second)
	defer limit.Stop()
	for _, o := range before {
		select {
		case <-o.off:
		case <-limit.C:
			lm.n.log.Warn("starting while an earlier lease's job still holds the GPUs", "lease", l.Id, "earlier", o.lease.Id)
			return true
		case <-lm.ctx.Done():
			return false
		}
	}
	return true
}

// loop meters the running job until it ends.
func (r *run) loop() {
	lm, ll := r.lm, r.ll
	tick := time.NewTicker(lm.n.cfg.Jobs.HeartbeatInterval.Std())
	defer tick.Stop()
	end := time.NewTimer(time.Until(time.UnixMilli(ll.rec.EndMs)))
	defer end.Stop()
	for {
		select {
		case code := <-r.exited:
			r.beat()
			outcome, note := pb.Outcome_OUTCOME_COMPLETED, fmt.Sprintf("the job exited with code %d", code)
			if r.pending != nil && r.pending.outcome == pb.Outcome_OUTCOME_CANCELLED {
				outcome, note = r.pending.outcome, r.pending.note
			}
			r.finish(outcome, note, code)
			return
		case now := <-tick.C:
			r.beat()
			if away := ll.out.detachedFor(now); away > lm.n.cfg.Jobs.RenterGrace.Std() {
				r.stopJob(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: fmt.Sprintf("the renter was gone for %s", away.Round(time.Second))})
				return
			}
		case <-end.C:
			s := stopRequest{outcome: pb.Outcome_OUTCOME_COMPLETED, note: "the lease's term ended"}
			if r.pending != nil {
				s = *r.pending
			}
			r.stopJob(s)
			return
		case s := <-ll.stop:
			if time.Until(s.at) > 0 {
				r.pending = &s
				ll.rec.EndMs, ll.rec.StopOutcome, ll.rec.StopNote = s.at.UnixMilli(), int32(s.outcome), s.note
				r.persist()
				end.Reset(time.Until(s.at))
				ll.out.send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("%s: the job will be stopped at %s (in %s)", s.note, s.at.UTC().Format(time.RFC3339), time.Until(s.at).Round(time.Second))}})
				continue
			}
			r.stopJob(s)
			return
		case <-lm.ctx.Done():
			r.leaveOrStop()
			return
		}
	}
}

// stopJob stops the job (SIGTERM, grace, SIGKILL, removal), takes a last
// beat and ends the lease with s's outcome.
func (r *run) stopJob(s stopRequest) {
	grace := r.lm.n.cfg.Jobs.StopGrace.Std()
	r.ll.out.send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("%s: stopping the job (SIGTERM, then SIGKILL after %s)", s.note, grace)}})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.lm.ctx), grace+30*time.Second)
	defer cancel()
	if err := r.job.Stop(ctx, grace); err != nil {
		r.lm.n.log.Warn("job not stopped cleanly", "lease", r.ll.lease.Id, "err", err)
	}
	code := -1
	select {
	case code = <-r.exited:
	case <-ctx.Done():
	}
	r.beat()
	r.finish(s.outcome, s.note, code)
}

// remove takes away what a job left (its container); Stop is idempotent,
// so a job already stopped is only checked.
func (r *run) remove() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.lm.ctx), 30*time.Second)
	defer cancel()
	if err := r.job.Stop(ctx, 0); err != nil {
		r.lm.n.log.Warn("exited job not removed", "lease", r.ll.lease.Id, "err", err)
	}
}

// leaveOrStop handles the node closing under a running lease: a container
// keeps running, to be adopted after the restart; a process dies with the
// provider anyway, so its lease fails now.
func (r *run) leaveOrStop() {
	if r.lm.exec.Name() == ExecutorDocker {
		r.persist()
		return
	}
	r.stopJob(stopRequest{outcome: pb.Outcome_OUTCOME_FAILED, note: "the provider shut down"})
}

// beat signs the next telemetry beat with the leased GPUs' readings,
// persists the chain and then sends the beat to the renter. In the other
// order a provider killed in between would sign that seq again after its
// restart, a second beat the renter could not link.
func (r *run) beat() {
	env, err := r.chain.Next(time.Now(), r.samples())
	if err != nil {
		r.lm.n.log.Warn("telemetry beat not signed", "lease", r.ll.lease.Id, "err", err)
		return
	}
	r.ll.rec.LastEnv = env
	r.persist()
	r.ll.out.send(&pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: env}})
}

// samples reads the leased GPUs, when the provider has a GPU source.
func (r *run) samples() []*attestpb.GPUSample {
	p := r.lm.n.provider
	if p == nil || p.source == nil {
		return nil
	}
	inv, err := p.source.Inventory(r.lm.ctx)
	if err != nil {
		return nil
	}
	var out []*attestpb.GPUSample
	for _, g := range inv.GPUs {
		for _, id := range r.ll.rec.GPUs {
			if g.UUID == id {
				out = append(out, &attestpb.GPUSample{Uuid: g.UUID, UtilizationPct: uint32(g.UtilizationPct), MemoryUsedBytes: g.MemoryUsedBytes,
					TemperatureC: uint32(max(g.TemperatureC, 0)), PowerMilliwatts: uint32(g.PowerDrawWatts * 1000)})
			}
		}
	}
	return out
}

// persist writes the lease record with the chain so far.
func (r *run) persist() {
	rec := r.ll.rec
	rec.Beats, rec.Root, rec.LastBeat = r.chain.Beats(), r.chain.Root(), r.chain.Last().UnixMilli()
	if err := r.lm.store.put(context.WithoutCancel(r.lm.ctx), rec, nil); err != nil {
		r.lm.n.log.Error("lease not persisted", "lease", rec.ID, "err", err)
	}
}

// finish ends the lease: a receipt metered from the last beat, signed by
// the provider, stored with the lease's final state and settled in the
// ledger in one batch; then offered to the renter to countersign.
func (r *run) finish(outcome pb.Outcome, note string, exitCode int) {
	lm, ll := r.lm, r.ll
	l := ll.lease
	last := time.Time{}
	if r.chain != nil && r.chain.Beats() > 0 {
		last = r.chain.Last()
	}
	seconds, amount := market.Meter(l, last)
	rc := &pb.Receipt{
		Version: market.Version, LeaseId: l.Id, LeaseHash: market.BodyHash(ll.cs), Renter: l.Renter, Provider: l.Provider,
		Outcome: outcome, StartUnixMs: l.StartUnixMs, EndUnixMs: time.Now().UnixMilli(), MeteredSeconds: seconds,
		Currency: l.Currency, AmountMicros: amount, ExitCode: int32(exitCode), Note: note,
	}
	if r.chain != nil {
		rc.Beats, rc.TelemetryRoot = r.chain.Beats(), r.chain.Root()
	}
	rcs, err := market.NewCoSigned(lm.n.key, market.Provider, rc)
	if err != nil {
		lm.n.log.Error("receipt not signed", "lease", l.Id, "err", err)
		return
	}
	rec := ll.rec
	rec.State, rec.Note, rec.EndMs = stateOf(outcome), note, rc.EndUnixMs
	rec.Receipt, _ = proto.Marshal(rcs)
	if r.chain != nil {
		rec.Beats, rec.Root, rec.LastBeat = r.chain.Beats(), r.chain.Root(), r.chain.Last().UnixMilli()
	}
	if err := lm.store.put(context.WithoutCancel(lm.ctx), rec, rc); err != nil {
		lm.n.log.Error("lease end not persisted", "lease", l.Id, "err", err)
	}
	lm.n.ended(rec, rc)
	// Removed only once the end is stored: a provider killed in between
	// finds the container on restart and stops it as an orphan, where the
	// other order would leave an ended job looking lost.
	if r.job != nil {
		r.remove()
	}
	close(ll.off)
	lm.mu.Lock()
	for _, c := range lm.cals {
		c.Release(l.Id, time.Now())
	}
	delete(lm.live, l.Id)
	lm.mu.Unlock()
	lm.n.log.Info("lease ended", "lease", l.Id, "state", rec.State, "seconds", seconds, "amount", FormatPrice(amount), "note", note)
	lm.collectSignature(rec, ll.out)
}

// collectSignature sends the provider-signed receipt to the attached
// renter and keeps the renter's countersignature if it comes back, for
// the same body, within receiptWait.
func (lm *leaseManager) collectSignature(rec *leaseRecord, out *jobOutput) {
	defer out.close()
	rcs := new(pb.CoSigned)
	if err := proto.Unmarshal(rec.Receipt, rcs); err != nil || len(rcs.RenterSignature) > 0 {
		return
	}
	out.send(&pb.JobFrame{Kind: &pb.JobFrame_Receipt{Receipt: rcs}})
	select {
	case reply := <-out.replies:
		if reply.Receipt == nil {
			lm.n.log.Warn("renter refused the receipt", "lease", rec.ID, "why", reply.Refusal)
			return
		}
		if !market.SameBody(reply.Receipt, rcs) {
			lm.n.log.Warn("renter countersigned other terms", "lease", rec.ID)
			return
		}
		rc, err := market.OpenCoSigned[*pb.Receipt](reply.Receipt, market.Renter, market.Provider)
		if err != nil {
			lm.n.log.Warn("renter's countersignature refused", "lease", rec.ID, "err", err)
			return
		}
		rec.Receipt, _ = proto.Marshal(reply.Receipt)
		if err := lm.store.put(context.WithoutCancel(lm.ctx), rec, nil); err != nil {
			lm.n.log.Error("co-signed receipt not persisted", "lease", rec.ID, "err", err)
		}
		lm.n.log.Info("receipt co-signed", "lease", rec.ID, "renter", peer.ID(rc.Renter))
	case <-time.After(receiptWait):
		lm.n.log.Info("receipt kept with the provider's signature only: the renter did not countersign", "lease", rec.ID)
	case <-lm.ctx.Done():
	}
}
