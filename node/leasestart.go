package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/jobstream"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// leaseDeps are what a lease owner is built from.
type leaseDeps struct {
	id       peer.ID
	limits   market.Limits
	key      crypto.PrivKey
	provider config.ProviderConfig
	jobs     config.JobsConfig
	exec     executor.Executor
	store    records.Store
	clock    clock.Clock
	log      *slog.Logger
	offer    func() (*pb.Offer, bool)
	source   attest.GPUSource
	ended    func(*records.Lease, *pb.Receipt)
	// renterScore is a renter's score as a renter, in [0, 1]; nil: none.
	renterScore func(peer.ID) float64
	// stageDir keeps the tars renters upload for their leases; empty:
	// uploads are refused.
	stageDir string
	// signed is told when a renter's countersignature of a receipt is
	// stored (the scores resting on receipts change); may be nil.
	signed func()
	// metrics counts the executor's failures; may be nil.
	metrics *metrics.Metrics
}

// newLeaseOwner builds the calendars from the provider's GPUs, as inv
// (nil for the static list) shows them: each GPU UUID is a slot (static
// GPUs get numbered slots). It starts nothing.
func newLeaseOwner(d leaseDeps, inv *attest.Inventory) (*leaseOwner, *leaseState, error) {
	lo := &leaseOwner{
		id: d.id, key: d.key, limits: d.limits, jobs: d.jobs, notice: d.provider.BronzeNotice.Std(), perRenter: d.provider.RenterLeases, exec: d.exec, store: d.store,
		minRenterScore: d.provider.MinRenterScore, renterScore: d.renterScore,
		clock: d.clock, log: d.log, offer: d.offer, source: d.source, ended: d.ended, signed: d.signed, metrics: d.metrics,
		matcher: market.NewMatcher(market.DefaultMatchConfig(), nil, nil), slots: map[string]int{},
		own: owner.New[*leaseState](),
	}
	if pl, ok := d.exec.(executor.Puller); ok {
		lo.images = newImagePulls(pl, d.jobs, d.offer, d.log, d.metrics)
		lo.setupImages(d.stageDir)
	}
	if _, ok := d.exec.(executor.Sessions); ok && d.stageDir != "" && d.jobs.MaxUploadMiB > 0 {
		stage, err := transfer.NewStage(d.stageDir, lo.stageRules(d.jobs, d.clock))
		if err != nil {
			return nil, nil, fmt.Errorf("uploads: %w", err)
		}
		lo.stage = stage
	}
	st := &leaseState{cals: map[string]*market.Calendar{}, live: map[string]*liveLease{}, admitting: map[string]*admission{}, unsigned: map[string]unsignedReceipt{}}
	slots := map[string][]string{}
	if inv != nil {
		for _, g := range inv.GPUs {
			if share := d.provider.Share; len(share) == 0 || slices.Contains(share, g.UUID) || slices.Contains(share, fmt.Sprint(g.Index)) {
				m := attest.ModelOf(g.Name, g.PCIDeviceID)
				slots[m] = append(slots[m], g.UUID)
			}
		}
	}
	for _, g := range d.provider.GPUs {
		for range g.Count {
			slots[g.Model] = append(slots[g.Model], fmt.Sprintf("%s-%d", strings.ToLower(g.Model), len(slots[g.Model])))
		}
	}
	o, err := offer.Build(d.provider, d.id, 0, d.clock.Now())
	if err != nil {
		return nil, nil, err
	}
	for model, ids := range slots {
		c, err := market.NewCalendar(ids, market.Availability{Weekly: o.Weekly}, lo.notice)
		if err != nil {
			return nil, nil, err
		}
		st.cals[model], lo.slots[model] = c, len(ids)
	}
	return lo, st, nil
}

// start starts the owner on st, picks up the leases a previous run left
// and serves the lease and job protocols. ctx ends the supervisors and
// the handlers; stop waits for them.
func (lo *leaseOwner) start(ctx context.Context, st *leaseState, sv p2p.Server) {
	lo.ctx, lo.cancel = context.WithCancel(ctx)
	lo.own.Start(st)
	if err := lo.recover(lo.ctx); err != nil {
		lo.log.Warn("leases not fully recovered", "err", err)
	}
	sv.Ctx = lo.ctx
	p2p.ServeLeases(sv, lo.handle)
	p2p.ServeJobs(sv, lo.attach)
	if _, ok := lo.exec.(executor.Sessions); ok {
		p2p.ServeSessions(sv, lo.session)
	}
	if lo.images != nil {
		p2p.ServeImages(sv, lo.jobs.PullTimeout.Std(), lo.images.ready, lo.images.load)
		go lo.images.run(lo.ctx)
	}
	if lo.stage != nil {
		lo.stage.Start(lo.ctx) // frees what renters left, on the clock
		p2p.ServeUploads(sv, lo.stageUpload)
		p2p.ServeDownloads(sv, lo.openOutput)
	}
}

// stageUpload takes a renter's upload into the stage.
func (lo *leaseOwner) stageUpload(from peer.ID, sum []byte, size int64) (int64, p2p.UploadSink, error) {
	have, part, err := lo.stage.Begin(from, sum, size)
	if err != nil || part == nil {
		return have, nil, err
	}
	return have, part, nil
}

// stop ends the supervisors, which leave containers running for the next
// start to adopt, and waits for them, then stops the owner.
func (lo *leaseOwner) stop() {
	lo.cancel()
	// A barrier: every supervisor the owner started before the cancel
	// is counted before the wait; it starts none after it.
	lo.do(context.Background(), func(*leaseState) {})
	lo.sup.Wait()
	if lo.stage != nil {
		lo.stage.Close()
	}
	lo.own.Stop()
	if lo.exec != nil {
		lo.exec.Close()
	}
}

// liveLease is a lease the provider supervises now.
type liveLease struct {
	lease *pb.Lease
	cs    *pb.CoSigned
	rec   *records.Lease // written only by the lease's supervisor
	feed  *jobstream.Feed
	stop  chan stopRequest // to the supervisor
	// off is closed once the lease has ended and its job is gone from
	// the GPUs (stopped and removed).
	off chan struct{}
	// sessions counts the renter's sessions open into the job.
	sessions atomic.Int32
	// detached: the renter left the job on purpose; its absence does
	// not end the lease. Copied into rec when the supervisor writes it.
	detached atomic.Bool
	// term is the lease's term as its last extension set it; set by the
	// owner goroutine, which hands the supervisor each new one on
	// extended (with a channel it closes once it recorded it).
	term     atomic.Pointer[market.Term]
	extended chan chan struct{}
}

// stopRequest ends a live lease with an outcome, at a time (a preemption
// gives notice: at lies ahead) or now.
type stopRequest struct {
	outcome pb.Outcome
	note    string
	at      time.Time
}

// newLive is the live state of a lease about to be supervised.
// l is the lease as co-signed, t its term as its last extension set it.
func newLive(clk clock.Clock, l *pb.Lease, t market.Term, rec *records.Lease) *liveLease {
	ll := &liveLease{lease: l, cs: t.Signed, rec: rec, feed: jobstream.New(clk, rec.LastEnv, rec.Output),
		stop: make(chan stopRequest, 1), off: make(chan struct{}), extended: make(chan chan struct{})}
	ll.detached.Store(rec.Detached)
	ll.term.Store(&t)
	ll.feed.Hold(nil, t.Extension) // extended before a restart
	return ll
}

// stamp copies into the record how far the job's output came and whether
// the renter left on purpose; by the supervisor, before it writes rec.
func (ll *liveLease) stamp() {
	ll.rec.Output, ll.rec.Detached = ll.feed.Offsets(), ll.detached.Load()
}

// requestStop hands a stop to the supervisor without blocking; a later
// request replaces one not yet taken.
func (ll *liveLease) requestStop(r stopRequest) {
	for {
		select {
		case ll.stop <- r:
			return
		default:
		}
		select {
		case <-ll.stop:
		default:
		}
	}
}

// supervise starts, in the owner, the goroutine that runs a lease:
// adopted is a job found after a restart, else nil; a lost reason ends
// the lease as failed at once. Once the owner is stopping it starts none:
// the stored lease waits for the next start.
func (lo *leaseOwner) supervise(st *leaseState, ll *liveLease, adopted executor.Job, lost string) {
	if lo.ctx.Err() != nil {
		return
	}
	st.live[ll.lease.Id] = ll
	lo.nLive.Add(1)
	ll.feed.Start()
	lo.sup.Add(1)
	go func() {
		defer lo.sup.Done()
		lo.runLease(ll, adopted, lost)
	}()
}

// attach hands a renter's job stream to its lease: live, it follows the
// job until the feed lets go of the stream; ended, it gets the output it
// had not got and the receipt. A renter that holds less of the output
// than the feed keeps gets the part in between from the engine's log
// first.
func (lo *leaseOwner) attach(ctx context.Context, from peer.ID, att *pb.JobAttach, s network.Stream) error {
	id := att.LeaseId
	have := records.Offsets{Stdout: int64(min(att.StdoutOffset, 1<<62)), Stderr: int64(min(att.StderrOffset, 1<<62))}
	var ll *liveLease
	lo.do(ctx, func(st *leaseState) { ll = st.live[id] })
	if ll != nil && peer.ID(ll.lease.Renter) == from {
		have = lo.replayLogs(ctx, ll, have, s)
		select {
		case <-ll.feed.Attach(s, have):
		case <-ctx.Done():
		}
		return nil
	}
	rec, err := lo.store.Get(ctx, id)
	if err != nil || rec.Role != records.Provider || len(rec.Receipt) == 0 {
		return fmt.Errorf("no lease %s to attach to", id)
	}
	l, cs, err := rec.Open()
	if err != nil || peer.ID(l.Renter) != from {
		return fmt.Errorf("lease %s is not %s's", id, from)
	}
	feed := jobstream.New(lo.clock, rec.LastEnv, records.Offsets{})
	t, err := records.Term(l, cs, rec)
	if err != nil {
		return err
	}
	feed.Hold(rec.Undelivered, t.Extension)
	feed.Start()
	feed.Attach(s, have)
	lo.collectSignature(ctx, rec, feed)
	return nil
}

// replayRounds bounds the engine log reads of one re-attach: output that
// outruns the feed's backlog while one is read is read in the next.
const replayRounds = 3

// replayLogs sends a re-attaching renter, straight on s, the output it
// has not got that the feed no longer keeps, from the engine's log, and
// returns what the renter then holds. A part the engine no longer keeps
// either is skipped: the renter sees the gap in the offsets.
func (lo *leaseOwner) replayLogs(ctx context.Context, ll *liveLease, have records.Offsets, s network.Stream) records.Offsets {
	for range replayRounds {
		kept := ll.feed.Detach()
		if have.Stdout >= kept.Stdout && have.Stderr >= kept.Stderr || lo.exec == nil {
			break
		}
		stdout, stderr := jobstream.Direct(s, have)
		if _, err := lo.exec.Logs(ctx, ll.lease.Id, executor.Offsets(have), executor.Offsets(kept), executor.Output{Stdout: stdout, Stderr: stderr}); err != nil {
			lo.log.Info("output not replayed from the engine's log", "lease", ll.lease.Id, "err", err)
			break
		}
		have = records.Offsets{Stdout: max(have.Stdout, kept.Stdout), Stderr: max(have.Stderr, kept.Stderr)}
	}
	return have
}

// recover picks up the provider's leases after a restart, the way they
// were left: each lease not ended gets its calendar slots back; a running
// job the executor still has is adopted (and stopped at once if its term
// ended meanwhile); a lease whose job is gone fails, metered up to its
// last persisted beat; a lease not yet started is started. Jobs the
// executor runs for no lease left open are stopped: nothing runs that no
// lease pays for.
func (lo *leaseOwner) recover(ctx context.Context) error {
	recs, err := lo.store.All(ctx)
	if err != nil {
		return err
	}
	now := lo.clock.Now()
	for _, rec := range recs {
		if rec.Role != records.Provider || records.Ended(rec.State) {
			continue
		}
		if err := lo.recoverOne(ctx, rec, now); err != nil {
			lo.log.Error("stored lease unreadable; left as it is", "lease", rec.ID, "err", err)
		}
	}
	return lo.stopOrphans(ctx)
}

// recoverOne picks up one lease not ended.
func (lo *leaseOwner) recoverOne(ctx context.Context, rec *records.Lease, now time.Time) error {
	l, cs, err := rec.Open()
	if err != nil {
		return err
	}
	t, err := records.Term(l, cs, rec)
	if err != nil {
		lo.log.Error("lease's extension unreadable; its term is the lease's own", "lease", l.Id, "err", err)
	}
	ll := newLive(lo.clock, l, t, rec)
	var job executor.Job
	if lo.exec != nil {
		if job, err = lo.exec.Adopt(ctx, l.Id, executor.Offsets(rec.Output), executor.Output{Stdout: ll.feed.Writer(false), Stderr: ll.feed.Writer(true)}); err != nil {
			if !errors.Is(err, executor.ErrNotFound) {
				lo.metrics.ExecutorFailed(metrics.ExecAdopt)
			}
			job = nil
		}
		if c, ok := lo.exec.(executor.Collector); ok && job != nil {
			c.Collect(job, l.Id, lo.spec(l, rec.GPUs).Outputs)
		}
	}
	a := market.Allocation{ID: l.Id, GPUIDs: rec.GPUs, Start: time.UnixMilli(l.StartUnixMs), End: time.UnixMilli(rec.EndMs), Tier: l.Tier, PriceMicros: l.PriceMicros}
	return lo.do(ctx, func(st *leaseState) {
		held := false
		for _, c := range st.cals {
			if c.Restore(a) == nil {
				held = true
				break
			}
		}
		lost := ""
		switch {
		case !held:
			// Its GPUs are gone from this machine (or the calendar holds
			// the ID twice): kept going, the lease would run on GPUs the
			// calendar could sell again.
			lost = fmt.Sprintf("its GPUs %v are not among this provider's any more", rec.GPUs)
			lo.log.Error("lease's GPUs not found after restart; the lease fails", "lease", l.Id, "gpus", rec.GPUs)
		case job != nil:
		case rec.State == records.Active:
			lost = "the job was lost while the provider was down"
		case !now.Before(time.UnixMilli(rec.EndMs)):
			lost = "the lease's term passed while the provider was down"
		case lo.exec == nil:
			lost = "this provider runs no jobs any more (jobs.executor = none)"
		}
		lo.log.Info("lease recovered", "lease", l.Id, "state", rec.State, "adopted", job != nil, "lost", lost)
		lo.supervise(st, ll, job, lost)
	})
}

// stopOrphans stops the jobs the executor runs for leases that are not
// live: ended ones, or ones never recorded (a provider killed between
// starting a job and writing it down).
func (lo *leaseOwner) stopOrphans(ctx context.Context) error {
	if lo.exec == nil {
		return nil
	}
	ids, err := lo.exec.Running(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	lo.do(ctx, func(st *leaseState) {
		for id := range st.live {
			live[id] = true
		}
	})
	for _, id := range ids {
		if live[id] {
			continue
		}
		job, err := lo.exec.Adopt(ctx, id, executor.Offsets{}, executor.Output{})
		if err != nil {
			continue
		}
		lo.log.Warn("stopping a job no open lease pays for", "lease", id)
		if err := job.Stop(ctx, lo.jobs.StopGrace.Std()); err != nil {
			lo.log.Warn("orphan job not stopped", "lease", id, "err", err)
			lo.metrics.ExecutorFailed(metrics.ExecStop)
		}
	}
	return nil
}
