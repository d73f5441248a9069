package lease

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
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/jobstream"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Deps are what a lease owner is built from.
type Deps struct {
	Id       peer.ID
	Limits   market.Limits
	Key      crypto.PrivKey
	Provider config.ProviderConfig
	Jobs     config.JobsConfig
	Exec     executor.Executor
	Store    records.Store
	Clock    clock.Clock
	Log      *slog.Logger
	Offer    func() (*pb.Offer, bool)
	Source   attest.GPUSource
	Ended    func(*records.Lease, *pb.Receipt)
	// RenterScore is a renter's score as a renter, in [0, 1]; nil: none.
	RenterScore func(peer.ID) float64
	// StageDir keeps the tars renters upload for their leases; empty:
	// uploads are refused.
	StageDir string
	// Signed is told when a renter's countersignature of a receipt is
	// stored (the scores resting on receipts change); may be nil.
	Signed func()
	// Metrics counts the executor's failures; may be nil.
	Metrics *metrics.Metrics
	// Records is this provider's chain of lease records; nil: none kept.
	Records Records
	// Wallet takes the leases paid by a channel (settlement evm); nil:
	// such leases are refused.
	Wallet *pay.Wallet
	// Datasets stages leases' datasets, written for their jobs in a
	// folder per lease under MountDir; nil or empty: leases with
	// datasets are refused.
	Datasets Datasets
	MountDir string
}

// Records is this provider's chain of lease records (node/trustchain):
// the lease owner proposes a record as each lease ends and keeps the
// renter's agreement that completes it.
type Records interface {
	// Propose records rc in the chain, or returns the lease's record
	// made before.
	Propose(ctx context.Context, rc *pb.Receipt, lease, ext *pb.CoSigned) (*chain.Block, error)
	// Of is the record of the lease whose co-signed body hashes to
	// leaseHash.
	Of(ctx context.Context, leaseHash []byte) (*chain.Block, error)
	// Completed keeps the counterparty's agreement to proposal.
	Completed(ctx context.Context, proposal *chain.Block, agreement *pb.SignedBlock) error
}

// New builds the calendars from the provider's GPUs, as inv
// (nil for the static list) shows them: each GPU UUID is a slot (static
// GPUs get numbered slots). It starts nothing.
func New(d Deps, inv *attest.Inventory) (*Owner, *State, error) {
	lo := &Owner{
		id: d.Id, key: d.Key, limits: d.Limits, jobs: d.Jobs, notice: d.Provider.BronzeNotice.Std(), perRenter: d.Provider.RenterLeases, Exec: d.Exec, store: d.Store,
		minRenterScore: d.Provider.MinRenterScore, renterScore: d.RenterScore,
		clock: d.Clock, log: d.Log, offer: d.Offer, source: d.Source, ended: d.Ended, signed: d.Signed, metrics: d.Metrics, records: d.Records, wallet: d.Wallet,
		datasets: d.Datasets, mountDir: d.MountDir,
		matcher: market.NewMatcher(market.DefaultMatchConfig(), nil, nil), Slots: map[string]int{},
		own: owner.New[*State](),
	}
	if pl, ok := d.Exec.(executor.Puller); ok {
		lo.images = newImagePulls(pl, d.Jobs, d.Offer, d.Log, d.Metrics)
		lo.setupImages(d.StageDir)
	}
	if _, ok := d.Exec.(executor.Sessions); ok && d.StageDir != "" && d.Jobs.MaxUploadMiB > 0 {
		stage, err := transfer.NewStage(d.StageDir, lo.stageRules(d.Jobs, d.Clock))
		if err != nil {
			return nil, nil, fmt.Errorf("uploads: %w", err)
		}
		lo.stage = stage
	}
	st := &State{Cals: map[string]*market.Calendar{}, Live: map[string]*liveLease{}, admitting: map[string]*admission{}, unsigned: map[string]unsignedReceipt{}}
	slots := map[string][]string{}
	if inv != nil {
		for _, g := range inv.GPUs {
			if share := d.Provider.Share; len(share) == 0 || slices.Contains(share, g.UUID) || slices.Contains(share, fmt.Sprint(g.Index)) {
				m := attest.ModelOf(g.Name, g.PCIDeviceID)
				slots[m] = append(slots[m], g.UUID)
			}
		}
	}
	for _, g := range d.Provider.GPUs {
		for range g.Count {
			slots[g.Model] = append(slots[g.Model], fmt.Sprintf("%s-%d", strings.ToLower(g.Model), len(slots[g.Model])))
		}
	}
	o, err := offer.Build(d.Provider, d.Id, 0, d.Clock.Now())
	if err != nil {
		return nil, nil, err
	}
	for model, ids := range slots {
		c, err := market.NewCalendar(ids, market.Availability{Weekly: o.Weekly}, lo.notice)
		if err != nil {
			return nil, nil, err
		}
		st.Cals[model], lo.Slots[model] = c, len(ids)
	}
	return lo, st, nil
}

// Start starts the owner on st, picks up the leases a previous run left
// and serves the lease and job protocols. ctx ends the supervisors and
// the handlers; stop waits for them.
func (lo *Owner) Start(ctx context.Context, st *State, sv p2p.Server) {
	lo.ctx, lo.cancel = context.WithCancel(ctx)
	lo.own.Start(st)
	if err := lo.recover(lo.ctx); err != nil {
		lo.log.Warn("leases not fully recovered", "err", err)
	}
	lo.Do(lo.ctx, lo.sweepMounts)
	sv.Ctx = lo.ctx
	p2p.ServeLeases(sv, lo.handle)
	p2p.ServeJobs(sv, lo.attach)
	if _, ok := lo.Exec.(executor.Sessions); ok {
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
func (lo *Owner) stageUpload(from peer.ID, sum []byte, size int64) (int64, p2p.UploadSink, error) {
	have, part, err := lo.stage.Begin(from, sum, size)
	if err != nil || part == nil {
		return have, nil, err
	}
	return have, part, nil
}

// Stop ends the supervisors, which leave containers running for the next
// start to adopt, and waits for them, then stops the owner.
func (lo *Owner) Stop() {
	lo.cancel()
	// A barrier: every supervisor the owner started before the cancel
	// is counted before the wait; it starts none after it.
	lo.Do(context.Background(), func(*State) {})
	lo.sup.Wait()
	if lo.stage != nil {
		lo.stage.Close()
	}
	lo.own.Stop()
	if lo.Exec != nil {
		lo.Exec.Close()
	}
}

// liveLease is a lease the provider supervises now.
type liveLease struct {
	lease *pb.Lease
	cs    *pb.CoSigned
	rec   *records.Lease // written only by the lease's supervisor
	Feed  *jobstream.Feed
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
	// unpaid: the renter's payment fell behind; the job is killed with no
	// grace and no last beat, so the receipt counts no more than the
	// beat the renter did not pay.
	unpaid bool
}

// newLive is the live state of a lease about to be supervised.
// l is the lease as co-signed, t its term as its last extension set it.
func newLive(clk clock.Clock, l *pb.Lease, t market.Term, rec *records.Lease) *liveLease {
	ll := &liveLease{lease: l, cs: t.Signed, rec: rec, Feed: jobstream.New(clk, rec.LastEnv, rec.Output),
		stop: make(chan stopRequest, 1), off: make(chan struct{}), extended: make(chan chan struct{})}
	ll.detached.Store(rec.Detached)
	ll.term.Store(&t)
	ll.Feed.Hold(nil, t.Extension) // extended before a restart
	return ll
}

// stamp copies into the record how far the job's output came and whether
// the renter left on purpose; by the supervisor, before it writes rec.
func (ll *liveLease) stamp() {
	ll.rec.Output, ll.rec.Detached = ll.Feed.Offsets(), ll.detached.Load()
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
func (lo *Owner) supervise(st *State, ll *liveLease, adopted executor.Job, lost string) {
	if lo.ctx.Err() != nil {
		return
	}
	st.Live[ll.lease.Id] = ll
	lo.nLive.Add(1)
	ll.Feed.Start()
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
func (lo *Owner) attach(ctx context.Context, from peer.ID, att *pb.JobAttach, s network.Stream) error {
	id := att.LeaseId
	have := records.Offsets{Stdout: int64(min(att.StdoutOffset, 1<<62)), Stderr: int64(min(att.StderrOffset, 1<<62))}
	var ll *liveLease
	lo.Do(ctx, func(st *State) { ll = st.Live[id] })
	if ll != nil && peer.ID(ll.lease.Renter) == from {
		have = lo.replayLogs(ctx, ll, have, s)
		select {
		case <-ll.Feed.Attach(s, have):
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
func (lo *Owner) replayLogs(ctx context.Context, ll *liveLease, have records.Offsets, s network.Stream) records.Offsets {
	for range replayRounds {
		kept := ll.Feed.Detach()
		if have.Stdout >= kept.Stdout && have.Stderr >= kept.Stderr || lo.Exec == nil {
			break
		}
		stdout, stderr := jobstream.Direct(s, have)
		if _, err := lo.Exec.Logs(ctx, ll.lease.Id, executor.Offsets(have), executor.Offsets(kept), executor.Output{Stdout: stdout, Stderr: stderr}); err != nil {
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
func (lo *Owner) recover(ctx context.Context) error {
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
func (lo *Owner) recoverOne(ctx context.Context, rec *records.Lease, now time.Time) error {
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
	if lo.Exec != nil {
		if job, err = lo.Exec.Adopt(ctx, l.Id, executor.Offsets(rec.Output), executor.Output{Stdout: ll.Feed.Writer(false), Stderr: ll.Feed.Writer(true)}); err != nil {
			if !errors.Is(err, executor.ErrNotFound) {
				lo.metrics.ExecutorFailed(metrics.ExecAdopt)
			}
			job = nil
		}
		if c, ok := lo.Exec.(executor.Collector); ok && job != nil {
			c.Collect(job, l.Id, lo.spec(l, rec.GPUs).Outputs)
		}
	}
	a := market.Allocation{ID: l.Id, GPUIDs: rec.GPUs, Start: time.UnixMilli(l.StartUnixMs), End: time.UnixMilli(rec.EndMs), Tier: l.Tier, PriceMicros: l.PriceMicros}
	return lo.Do(ctx, func(st *State) {
		held := false
		for _, c := range st.Cals {
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
		case lo.Exec == nil:
			lost = "this provider runs no jobs any more (jobs.executor = none)"
		}
		lo.log.Info("lease recovered", "lease", l.Id, "state", rec.State, "adopted", job != nil, "lost", lost)
		lo.supervise(st, ll, job, lost)
	})
}

// stopOrphans stops the jobs the executor runs for leases that are not
// live: ended ones, or ones never recorded (a provider killed between
// starting a job and writing it down).
func (lo *Owner) stopOrphans(ctx context.Context) error {
	if lo.Exec == nil {
		return nil
	}
	ids, err := lo.Exec.Running(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	lo.Do(ctx, func(st *State) {
		for id := range st.Live {
			live[id] = true
		}
	})
	for _, id := range ids {
		if live[id] {
			continue
		}
		job, err := lo.Exec.Adopt(ctx, id, executor.Offsets{}, executor.Output{})
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
