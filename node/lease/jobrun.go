package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// spec is what the executor runs for l on the GPUs assigned. A lease may
// ask for less CPU, memory and processes than the provider's limits,
// never more: what it asks beyond them is cut to them.
func (lo *Owner) spec(l *pb.Lease, gpus []string) executor.Spec {
	j := lo.jobs
	w := l.Workload
	s := executor.Spec{
		LeaseID: l.Id, Image: w.Image, Command: w.Command,
		Env:         append(append([]string{}, w.Env...), "IDLEGRID_LEASE="+l.Id, "IDLEGRID_GPUS="+strings.Join(gpus, ",")),
		NanoCPUs:    within(int64(w.CpuMillis)*1e6, int64(j.CPUs)*1e9),
		MemoryBytes: within(int64(min(w.MemoryBytes, 1<<62)), int64(j.MemoryGiB)<<30),
		PIDs:        within(int64(min(w.Pids, 1<<31)), int64(j.PIDs)),
		User:        j.User, WorkspaceBytes: int64(j.WorkspaceMiB) << 20, LogBytes: int64(j.LogMiB) << 20,
	}
	// A lease that shares the host by GPUs is held to its share.
	if cpus, mem := lo.hostShare(l); cpus > 0 {
		s.NanoCPUs, s.MemoryBytes = within(s.NanoCPUs, cpus), within(s.MemoryBytes, mem)
	}
	// An engine refuses a limit above the CPUs the machine has.
	s.NanoCPUs = min(s.NanoCPUs, int64(runtime.NumCPU())*1e9)
	if j.PassGPUs {
		s.GPUs = gpus
	}
	s.Mounts = lo.mountsOf(l)
	for _, in := range w.GetInputs() {
		sum, size, renter := in.Sha256, int64(in.Size), peer.ID(l.Renter)
		s.Inputs = append(s.Inputs, executor.Input{Dir: path.Dir(in.Path), Open: func() (io.ReadCloser, error) {
			if lo.stage == nil {
				return nil, errors.New("this provider keeps no uploads")
			}
			st, err := lo.stage.Get(renter, sum, size)
			if err != nil {
				return nil, err
			}
			return os.Open(st.Path)
		}})
	}
	for i, p := range w.GetOutputs() {
		renter := peer.ID(l.Renter)
		s.Outputs = append(s.Outputs, executor.OutputPath{Path: p, Save: func(tar io.Reader) error {
			if lo.stage == nil {
				_, err := io.Copy(io.Discard, tar)
				return cmp.Or(err, errors.New("this provider keeps no outputs"))
			}
			return lo.stage.PutOutput(renter, l.Id, i, tar)
		}})
	}
	// Start judges the image it will run, by its ID, under the rules the
	// offer states then.
	if lo.offer != nil {
		o, _ := lo.offer()
		s.Images = executor.ImagePolicy{Allow: o.GetImageAllow(), Deny: o.GetImageDeny()}
	}
	return s
}

// within is what a lease asks of a resource (0: nothing in particular)
// held to the provider's limit (0: none).
// hostShare is the part of the host's cores (in nano-CPUs) and RAM a
// lease of l.GpuCount GPUs gets where the offer shares the host by GPUs
// (Offer.host_whole false) and l takes fewer than all of them; 0, 0
// otherwise. A share is at least a tenth of a core.
func (lo *Owner) hostShare(l *pb.Lease) (nanoCPUs, memBytes int64) {
	o, ok := lo.offer()
	total := 0
	for _, n := range lo.Slots {
		total += n
	}
	if !ok || o.GetHostWhole() || total == 0 || int(l.GpuCount) >= total {
		return 0, 0
	}
	n, h := int64(l.GpuCount), o.GetHost()
	nanoCPUs = max(int64(h.GetCpuCores())*1e9*n/int64(total), 1e8)
	memBytes = int64(min(h.GetRamBytes(), 1<<50)) * n / int64(total)
	return nanoCPUs, memBytes
}

func within(asked, limit int64) int64 {
	switch {
	case asked <= 0:
		return limit
	case limit > 0:
		return min(asked, limit)
	}
	return asked
}

// run is one supervisor's view of its lease's job.
type run struct {
	lo      *Owner
	ll      *liveLease
	job     executor.Job
	chain   *attest.Chain
	exited  chan int // exit code, once the job has exited
	pending *stopRequest
	// tab is what the renter paid of a lease paid by a channel (nil:
	// not paid by one), its Lease the term's (extended sets it);
	// refused counts the vouchers refused.
	tab     *pay.Tab
	refused int
	// resumed: a paid lease's run adopted after this provider's restart,
	// whose first tick leaves its renter the time to attach again.
	resumed bool
	// releases let the lease's datasets go when it ends.
	releases []func()
}

// runLease waits for the lease's start, starts (or adopts) its job,
// meters it with a beat every heartbeat interval, and ends it when the
// job exits, the term ends, a stop is requested or the renter is gone.
// When the owner stops it leaves a container running for the restarted
// provider to adopt.
func (lo *Owner) runLease(ll *liveLease, adopted executor.Job, lost string) {
	defer ll.Feed.Close()
	r := &run{lo: lo, ll: ll, job: adopted, exited: make(chan int, 1)}
	var err error
	if r.chain, err = attest.ResumeChain(lo.key, lo.limits.Swarm, ll.lease.Id, ll.rec.Beats, ll.rec.Root, time.UnixMilli(ll.rec.LastBeat)); err != nil {
		lost = "telemetry: " + err.Error()
	}
	if ll.lease.GetPayment() != nil && lost == "" {
		if r.tab, err = pay.TabOf(ll.term.Load().Lease, ll.rec.Voucher); err != nil {
			lost = "payment: " + err.Error()
		} else {
			r.readDeposit(chainWait)
		}
	}
	if lost != "" {
		r.finish(pb.Outcome_OUTCOME_FAILED, lost, -1)
		return
	}
	if o := ll.rec.StopOutcome; o != 0 {
		r.pending = &stopRequest{outcome: pb.Outcome(o), note: ll.rec.StopNote, at: time.UnixMilli(ll.rec.EndMs)}
	}
	if r.job == nil {
		if !r.waitStart() || !r.waitGPUs() || !r.stageDatasets() {
			return
		}
		if r.job, err = lo.Exec.Start(lo.ctx, lo.spec(ll.lease, ll.rec.GPUs), executor.Output{Stdout: ll.Feed.Writer(false), Stderr: ll.Feed.Writer(true)}); err != nil {
			lo.metrics.ExecutorFailed(metrics.ExecStart)
			r.finish(pb.Outcome_OUTCOME_FAILED, "job did not start: "+err.Error(), -1)
			return
		}
		for _, in := range ll.lease.GetWorkload().GetInputs() { // unpacked in the container: done with
			if lo.stage != nil {
				lo.stage.Remove(peer.ID(ll.lease.Renter), in.Sha256)
			}
		}
	}
	ll.rec.State, ll.rec.Job = records.Active, r.job.ID()
	r.persist()
	ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Started{Started: fmt.Sprintf("%s job %s on GPUs %v", lo.Exec.Name(), r.job.ID(), ll.rec.GPUs)}})
	// A paid lease adopted after a restart signs no beat before its renter
	// had a tick's time to attach again: no beat goes unpaid for the
	// provider's own absence.
	r.resumed = adopted != nil && r.tab != nil
	// The job's exit is waited for as long as this supervisor runs, also
	// while it stops the job during the owner's shutdown.
	waiting, stopWaiting := context.WithCancel(context.WithoutCancel(lo.ctx))
	defer stopWaiting()
	go func() {
		code, err := r.job.Wait(waiting)
		if err == nil {
			r.exited <- code
		}
	}()
	if !r.resumed {
		r.beat()
	}
	r.loop()
}

// waitStart waits for the lease's start; false when it ended first.
func (r *run) waitStart() bool {
	wait := r.lo.clock.NewTimer(r.lo.clock.Until(time.UnixMilli(r.ll.lease.StartUnixMs)))
	defer wait.Stop()
	select {
	case <-wait.C():
		return true
	case s := <-r.ll.stop:
		r.finish(s.outcome, s.note+" before the lease started", -1)
	case <-r.lo.ctx.Done():
	}
	return false
}

// waitGPUs waits until the jobs of the leases that held this lease's GPUs
// before it are gone: a preempted bronze job may still be in its stop
// grace at this lease's start, and two jobs must not share a GPU. The
// wait is bounded by the stop grace and half a minute for the engine;
// false when the owner stops first.
func (r *run) waitGPUs() bool {
	lo, l := r.lo, r.ll.lease
	var before []*liveLease
	lo.Do(lo.ctx, func(st *State) {
		for id, o := range st.Live {
			if id != l.Id && o.lease.StartUnixMs < l.StartUnixMs && slices.ContainsFunc(o.rec.GPUs, func(g string) bool { return slices.Contains(r.ll.rec.GPUs, g) }) {
				before = append(before, o)
			}
		}
	})
	limit := lo.clock.NewTimer(lo.jobs.StopGrace.Std() + 30*time.Second)
	defer limit.Stop()
	for _, o := range before {
		select {
		case <-o.off:
		case <-limit.C():
			lo.log.Warn("starting while an earlier lease's job still holds the GPUs", "lease", l.Id, "earlier", o.lease.Id)
			return true
		case <-lo.ctx.Done():
			return false
		}
	}
	return lo.ctx.Err() == nil
}

// loop meters the running job until it ends.
func (r *run) loop() {
	lo, ll := r.lo, r.ll
	tick := lo.clock.NewTicker(lo.jobs.HeartbeatInterval.Std())
	defer tick.Stop()
	end := lo.clock.NewTimer(lo.clock.Until(time.UnixMilli(ll.rec.EndMs)))
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
		case now := <-tick.C():
			// The tick's time may be stale on a busy machine: payment is
			// judged at the clock's now, which the beat is stamped with.
			if why := r.unpaid(lo.clock.Now()); why != "" {
				r.stopJob(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: why, unpaid: true})
				return
			}
			r.beat()
			if away := ll.Feed.DetachedFor(now); away > lo.jobs.RenterGrace.Std() && !ll.detached.Load() {
				r.stopJob(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: fmt.Sprintf("the renter was gone for %s", away.Round(time.Second))})
				return
			}
		case <-end.C():
			s := stopRequest{outcome: pb.Outcome_OUTCOME_COMPLETED, note: "the lease's term ended"}
			if r.pending != nil {
				s = *r.pending
			}
			r.stopJob(s)
			return
		case done := <-ll.extended:
			r.extended(end)
			close(done)
		case v := <-ll.Feed.Vouchers():
			if why := r.take(v); why != "" {
				r.stopJob(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: why, unpaid: true})
				return
			}
		case s := <-ll.stop:
			if !r.notice(s, end) {
				r.stopJob(s)
				return
			}
		case <-lo.ctx.Done():
			r.leaveOrStop()
			return
		}
	}
}

// notice takes a stop that lies ahead (a preemption with notice): it is
// persisted, the lease's end moves to it and the renter is told. It
// reports false for a stop due now.
func (r *run) notice(s stopRequest, end interface{ Reset(time.Duration) bool }) bool {
	lo, ll := r.lo, r.ll
	ahead := lo.clock.Until(s.at)
	if ahead <= 0 {
		return false
	}
	r.pending = &s
	ll.rec.EndMs, ll.rec.StopOutcome, ll.rec.StopNote = s.at.UnixMilli(), int32(s.outcome), s.note
	r.persist()
	end.Reset(ahead)
	ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("%s: the job will be stopped at %s (in %s)", s.note, s.at.UTC().Format(time.RFC3339), ahead.Round(time.Second))}})
	return true
}

// stopJob stops the job (SIGTERM, grace, SIGKILL, removal), takes a last
// beat and ends the lease with s's outcome.
func (r *run) stopJob(s stopRequest) {
	grace := r.lo.jobs.StopGrace.Std()
	if s.unpaid {
		grace = 0
	} else {
		// The last beat is the stop's: the renter pays until the job was
		// told to stop (a cancel, the term's end, a preemption's notice),
		// not for the grace its container takes to go.
		r.beat()
	}
	r.ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("%s: stopping the job (SIGTERM, then SIGKILL after %s)", s.note, grace)}})
	// The engine keeps real time: this deadline is the network's clock.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.lo.ctx), grace+30*time.Second)
	defer cancel()
	if err := r.job.Stop(ctx, grace); err != nil {
		r.lo.log.Warn("job not stopped cleanly", "lease", r.ll.lease.Id, "err", err)
		r.lo.metrics.ExecutorFailed(metrics.ExecStop)
	}
	code := -1
	select {
	case code = <-r.exited:
	case <-ctx.Done():
	}
	r.finish(s.outcome, s.note, code)
}

// remove takes away what a job left (its container); Stop is idempotent,
// so a job already stopped is only checked.
func (r *run) remove() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.lo.ctx), 30*time.Second)
	defer cancel()
	if err := r.job.Stop(ctx, 0); err != nil {
		r.lo.log.Warn("exited job not removed", "lease", r.ll.lease.Id, "err", err)
		r.lo.metrics.ExecutorFailed(metrics.ExecRemove)
	}
}

// leaveOrStop handles the owner stopping under a running lease: a
// container keeps running, to be adopted after the restart; a process
// dies with the provider anyway, so its lease fails now.
func (r *run) leaveOrStop() {
	if r.lo.Exec.Name() == config.ExecutorDocker {
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
	at := r.lo.clock.Now()
	if t := r.tab; t != nil {
		// A paid lease's beat the channel cannot pay is not signed: the
		// receipt never owes more than the deposit (the next tick stops
		// the job).
		if !t.Covers(pay.Metered(t.Lease, at)) {
			return
		}
	}
	env, err := r.chain.Next(at, r.samples())
	if err != nil {
		r.lo.log.Warn("telemetry beat not signed", "lease", r.ll.lease.Id, "err", err)
		return
	}
	r.ll.rec.LastEnv = env
	r.persist()
	r.ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: env}})
}

// samples reads the leased GPUs, when the provider has a GPU source.
func (r *run) samples() []*attestpb.GPUSample {
	if r.lo.source == nil {
		return nil
	}
	inv, err := r.lo.source.Inventory(r.lo.ctx)
	if err != nil {
		return nil
	}
	var out []*attestpb.GPUSample
	for _, g := range inv.GPUs {
		if slices.Contains(r.ll.rec.GPUs, g.UUID) {
			out = append(out, &attestpb.GPUSample{Uuid: g.UUID, UtilizationPct: uint32(g.UtilizationPct), MemoryUsedBytes: g.MemoryUsedBytes,
				TemperatureC: uint32(max(g.TemperatureC, 0)), PowerMilliwatts: uint32(g.PowerDrawWatts * 1000)})
		}
	}
	return out
}

// persist writes the lease record with the chain so far.
func (r *run) persist() {
	rec := r.ll.rec
	rec.Beats, rec.Root, rec.LastBeat = r.chain.Beats(), r.chain.Root(), r.chain.Last().UnixMilli()
	r.ll.stamp()
	if err := r.lo.store.Put(context.WithoutCancel(r.lo.ctx), rec, nil); err != nil {
		r.lo.log.Error("lease not persisted", "lease", rec.ID, "err", err)
	}
}

// MaxRefusedVouchers is how many vouchers a lease's renter may send that
// are refused (forged, replayed, for other terms) before its job is
// stopped: each costs a signature check.
const MaxRefusedVouchers = 8

// sent is the lease's metered time at the last beat sent (0 with none).
func (r *run) sent() time.Duration {
	if r.chain.Beats() == 0 {
		return 0
	}
	return pay.Metered(r.tab.Lease, r.chain.Last())
}

// take takes a voucher the renter sent (pay.Tab.Take) and persists it
// with the lease record; a renter whose vouchers keep being refused is
// told why its job stops.
func (r *run) take(v *pb.Voucher) (stop string) {
	if r.tab == nil {
		return ""
	}
	if r.tab.Same(v) {
		return ""
	}
	if err := r.tab.Take(v, r.sent()); err != nil {
		r.lo.metrics.Voucher(metrics.VoucherRefused)
		r.refused++
		r.lo.log.Warn("voucher refused", "lease", r.ll.lease.Id, "err", err)
		if r.refused >= MaxRefusedVouchers {
			return fmt.Sprintf("unpaid: the renter sent %d vouchers this provider refused; the last: %v", r.refused, err)
		}
		return ""
	}
	r.lo.metrics.Voucher(metrics.VoucherTaken)
	r.ll.rec.Voucher, _ = proto.Marshal(v)
	r.persist()
	if w := r.lo.wallet; w != nil && r.tab.Deposit != nil && w.Near(r.tab.Amount(), r.tab.Deposit) {
		w.Nudge()
	}
	return ""
}

// unpaid says why the job must stop now for its payment, at a tick: the
// renter has not paid for the last beat sent (it had a beat's interval
// to), or the channel cannot cover the next beat (its deposit is read
// again first: the renter may have topped it up). Empty: go on.
func (r *run) unpaid(now time.Time) string {
	if r.tab == nil {
		return ""
	}
	t := r.tab
	if r.resumed { // the first tick after a restart
		r.resumed = false
		return ""
	}
	if owed := t.Owed(r.sent()); t.Amount().Cmp(owed) < 0 {
		return fmt.Sprintf("unpaid: the renter's vouchers pay %s of the %s owed at the last beat (%s metered)", t.Amount(), owed, r.sent())
	}
	next := pay.Metered(t.Lease, now) + r.lo.jobs.HeartbeatInterval.Std()
	if t.Deposit == nil || !t.Covers(next) {
		// Read within half a beat: the chain may be slow, the run waits.
		r.readDeposit(r.lo.jobs.HeartbeatInterval.Std() / 2)
		if !t.Covers(next) {
			return fmt.Sprintf("unpaid: the channel's deposit %s does not cover the next beat (%s owed by then); the renter may top it up", t.Deposit, t.Owed(next))
		}
	}
	return ""
}

// readDeposit reads the channel's deposit from the chain into the tab,
// within wait; on failure it stays as it was (unknown: no beat is
// refused for it, and each tick reads it again).
func (r *run) readDeposit(wait time.Duration) {
	if r.lo.wallet == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.lo.ctx, wait)
	defer cancel()
	ch, err := r.lo.wallet.Chain.Channel(ctx, r.tab.Channel)
	if err != nil {
		r.lo.log.Warn("channel not read", "lease", r.ll.lease.Id, "err", err)
		return
	}
	r.tab.Deposit = ch.Deposit
}
