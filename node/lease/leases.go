package lease

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Owner is the provider's side of leases: it admits proposals
// against its offer and calendars, countersigns them, runs their jobs
// through the executor (one supervisor goroutine per lease), meters them
// and co-signs their receipts. The datastore holds every lease, so a
// restarted provider picks up where it was.
//
// One goroutine (run) owns the calendars and the live-lease table. A
// proposal is checked outside it (the offer, the matcher, the image on
// the engine), reserved in it (the calendar), countersigned and stored
// outside it, then committed (supervised) or released in it: no lock is
// held across Docker, pebble or signing.
type Owner struct {
	id        peer.ID
	limits    market.Limits
	key       crypto.PrivKey
	jobs      config.JobsConfig
	notice    time.Duration // the provider's bronze notice
	perRenter int           // open leases one renter may hold
	// minRenterScore is what a renter must score as a renter, by
	// renterScore, for a gold lease or one that starts more than
	// farAhead ahead (0: nothing).
	minRenterScore float64
	renterScore    func(peer.ID) float64
	Exec           executor.Executor // nil: jobs.executor = none
	store          records.Store
	clock          clock.Clock
	log            *slog.Logger
	offer          func() (*pb.Offer, bool) // the provider's offer as it stands
	source         attest.GPUSource         // readings for the beats; nil for none
	matcher        *market.Matcher
	ended          func(*records.Lease, *pb.Receipt) // counts an end; may be nil
	signed         func()                            // a countersigned receipt stored; may be nil
	metrics        *metrics.Metrics                  // counts the executor's failures; may be nil
	records        Records                           // this provider's chain of lease records; nil: none
	wallet         *pay.Wallet                       // takes leases paid by a channel; nil: none
	Slots          map[string]int                    // GPUs per model; fixed
	nLive          atomic.Int64
	images         *imagePulls     // readies images for renters; nil without a Puller
	stage          *transfer.Stage // renters' uploads; nil: uploads refused
	datasets       Datasets        // nil: leases with datasets refused
	mountDir       string          // the datasets' copies, a folder per lease
	// Holds bounds what renters with no history hold ahead together; nil:
	// nothing beyond perRenter.
	Holds *HoldPolicy

	ctx    context.Context // the supervisors'; ends when the owner stops
	cancel context.CancelFunc
	own    *owner.Owner[*State]
	sup    sync.WaitGroup // supervisors; Add only in the owner
}

// State is what the owner goroutine alone touches.
type State struct {
	Cals      map[string]*market.Calendar // by GPU model
	Live      map[string]*liveLease
	admitting map[string]*admission // reserved, being signed and stored
	// unsigned are the ended leases whose receipts the renter has not
	// countersigned, by lease ID: each counts against the renter's open
	// leases for unsignedMemory after its end.
	unsigned map[string]unsignedReceipt
}

// unsignedReceipt is a receipt a renter left without its signature.
type unsignedReceipt struct {
	renter peer.ID
	end    time.Time
}

// unsignedMemory is how long a receipt a renter left unsigned counts as
// one of its open leases: a renter that takes the GPUs and will not sign
// for them gets fewer.
const unsignedMemory = 24 * time.Hour

// admission is a proposal between its reservation and its commit: a
// second proposal of the same ID waits for it.
type admission struct {
	renter  peer.ID
	body    []byte
	channel string // the payment channel; empty: none
	settled chan struct{}
}

// reservation is the calendar's hold on a proposal's GPUs.
type reservation struct {
	model    string
	start    time.Time
	decision market.Decision
}

// Do runs f on the owner and waits for it.
func (lo *Owner) Do(ctx context.Context, f func(*State)) error { return lo.own.Do(ctx, f) }

// handle answers one lease request from a renter.
func (lo *Owner) handle(ctx context.Context, from peer.ID, req *pb.LeaseRequest) *pb.LeaseReply {
	switch k := req.Kind.(type) {
	case *pb.LeaseRequest_Propose:
		return lo.propose(ctx, from, k.Propose)
	case *pb.LeaseRequest_CancelLeaseId:
		return lo.cancelFor(ctx, from, k.CancelLeaseId)
	case *pb.LeaseRequest_DetachLeaseId:
		return lo.detachFor(ctx, from, k.DetachLeaseId)
	case *pb.LeaseRequest_Extend:
		return lo.extendFor(ctx, from, k.Extend)
	case *pb.LeaseRequest_TermsLeaseId:
		return lo.termsFor(ctx, from, k.TermsLeaseId)
	}
	return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "empty lease request").Reply()
}

// propose admits a lease the renter signed, or says why not. A proposal
// already accepted is answered with the same countersigned lease.
func (lo *Owner) propose(ctx context.Context, from peer.ID, cs *pb.CoSigned) *pb.LeaseReply {
	l, err := market.OpenCoSigned[*pb.Lease](cs, market.Renter)
	if err == nil {
		err = lo.limits.ValidateLease(l)
	}
	switch {
	case err != nil:
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "%v", err).Reply()
	case peer.ID(l.Renter) != from:
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "the lease names renter %s, the proposal came from %s", peer.ID(l.Renter), from).Reply()
	case peer.ID(l.Provider) != lo.id:
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "the lease names provider %s, not this one", peer.ID(l.Provider)).Reply()
	}
	for {
		if reply := lo.held(ctx, l.Id, cs); reply != nil {
			return reply
		}
		model, err := lo.check(ctx, l)
		if err != nil {
			return rejectionOf(err).Reply()
		}
		res, wait, err := lo.reserve(ctx, l, cs, model)
		if wait != nil {
			select { // the same proposal is being admitted: take its outcome
			case <-wait:
				continue
			case <-ctx.Done():
				return market.Reject(pb.RejectCode_REJECT_INTERNAL, "%v", ctx.Err()).Reply()
			}
		}
		if err != nil {
			return rejectionOf(err).Reply()
		}
		return lo.accept(ctx, l, cs, res)
	}
}

// held answers a proposal whose ID this provider has stored: the
// countersigned lease for the same terms, a refusal for others; nil when
// the ID is new.
func (lo *Owner) held(ctx context.Context, id string, cs *pb.CoSigned) *pb.LeaseReply {
	rec, err := lo.store.Get(ctx, id)
	switch {
	case errors.Is(err, ds.ErrNotFound):
		return nil
	case err != nil:
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "lease store: %v", err).Reply()
	}
	_, stored, err := rec.Open()
	if err != nil || !market.SameBody(stored, cs) {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "lease ID %s already names other terms", id).Reply()
	}
	return &pb.LeaseReply{Lease: stored}
}

// check applies the provider's terms to a proposal outside the owner:
// the market's rules against its offer, then its image rules and an
// executor that has the image. It returns the GPU model whose calendar
// the lease takes.
func (lo *Owner) check(ctx context.Context, l *pb.Lease) (string, error) {
	o, _ := lo.offer()
	now := lo.clock.Now()
	model, err := market.AdmitLease(lo.matcher, o, l, now)
	if err != nil {
		return "", err
	}
	if err := lo.checkRenter(l, now); err != nil {
		return "", err
	}
	if err := lo.checkPayment(ctx, l); err != nil {
		return "", err
	}
	if lo.Exec == nil {
		return "", market.Reject(pb.RejectCode_REJECT_INTERNAL, "this provider runs no jobs (jobs.executor = none)")
	}
	if err := lo.checkInputs(l); err != nil {
		return "", err
	}
	if err := lo.checkDatasets(l); err != nil {
		return "", err
	}
	spec := lo.spec(l, nil)
	spec.Images = executor.ImagePolicy{Allow: o.ImageAllow, Deny: o.ImageDeny}
	if err := lo.Exec.Check(ctx, spec); err != nil {
		if errors.Is(err, executor.ErrUnknownImage) || errors.Is(err, executor.ErrImageRefused) {
			return "", market.Reject(pb.RejectCode_REJECT_IMAGE, "%v", err)
		}
		lo.metrics.ExecutorFailed(metrics.ExecCheck)
		return "", market.Reject(pb.RejectCode_REJECT_INTERNAL, "%v", err)
	}
	return model, nil
}

// checkInputs refuses a lease whose inputs the renter has not uploaded,
// whole, before proposing it, and one with inputs or outputs where the
// provider keeps neither.
func (lo *Owner) checkInputs(l *pb.Lease) error {
	ins := l.GetWorkload().GetInputs()
	if len(ins)+len(l.GetWorkload().GetOutputs()) == 0 {
		return nil
	}
	if lo.stage == nil {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "this provider takes no uploads or downloads (jobs.max_upload_mib = 0, or its executor cannot unpack them)")
	}
	for i, in := range ins {
		if _, err := lo.stage.Get(peer.ID(l.Renter), in.Sha256, int64(in.Size)); err != nil {
			return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "workload.inputs[%d]: %v", i, err)
		}
	}
	return nil
}

// farAhead is how far ahead a lease must start for min_renter_score to
// apply to it whatever its tier.
const farAhead = 24 * time.Hour

// checkRenter refuses a gold lease, or one that starts more than farAhead
// ahead, to a renter that scores below the provider's min_renter_score as
// a renter: a provider may ask a record of those who would hold its
// calendar longest.
func (lo *Owner) checkRenter(l *pb.Lease, now time.Time) error {
	if lo.minRenterScore <= 0 || lo.renterScore == nil {
		return nil
	}
	if l.Tier != pb.Tier_TIER_GOLD && time.UnixMilli(l.StartUnixMs).Sub(now) <= farAhead {
		return nil
	}
	renter := peer.ID(l.Renter)
	if s := lo.renterScore(renter); s < lo.minRenterScore {
		return market.Reject(pb.RejectCode_REJECT_RENTER_SCORE, "renter %s scores %.2f as a renter here; this provider asks %.2f for gold leases and leases that start more than %s ahead", renter, s, lo.minRenterScore, farAhead)
	}
	return nil
}

// rejectionOf is err as a refusal: itself, or an internal one.
func rejectionOf(err error) *market.RejectError {
	var re *market.RejectError
	if errors.As(err, &re) {
		return re
	}
	return market.Reject(pb.RejectCode_REJECT_INTERNAL, "%v", err)
}

// reserve takes the lease's GPUs in the model's calendar, in the owner.
// A proposal of the same ID already being admitted is waited for (wait);
// a refusal names the earliest start at which the lease would fit once
// bronze leases have had their notice.
func (lo *Owner) reserve(ctx context.Context, l *pb.Lease, cs *pb.CoSigned, model string) (res reservation, wait <-chan struct{}, err error) {
	derr := lo.Do(ctx, func(st *State) {
		if a := st.admitting[l.Id]; a != nil {
			if bytes.Equal(a.body, cs.Body) {
				wait = a.settled
			} else {
				err = market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "lease ID %s already names other terms", l.Id)
			}
			return
		}
		if st.Live[l.Id] != nil { // committed since held() looked: look again
			wait = closed
			return
		}
		cal := st.Cals[model]
		if cal == nil {
			err = market.Reject(pb.RejectCode_REJECT_NO_CAPACITY, "no %d GPUs of one model here", l.GpuCount)
			return
		}
		now := lo.clock.Now()
		if other := st.paying(channelOf(l)); other != "" {
			err = market.Reject(pb.RejectCode_REJECT_RENTER_LIMIT, "payment.channel 0x%x pays lease %s here now; a channel pays one lease at a time", l.GetPayment().GetChannel(), other)
			return
		}
		if open, unsigned := st.heldBy(peer.ID(l.Renter), now); open+unsigned >= lo.perRenter {
			err = market.Reject(pb.RejectCode_REJECT_RENTER_LIMIT, "renter %s holds %d open leases here and left %d receipts unsigned in the last %s; this provider allows %d", peer.ID(l.Renter), open, unsigned, unsignedMemory, lo.perRenter)
			return
		}
		r := market.LeaseRequest{ID: l.Id, GPUs: int(l.GpuCount), Start: time.UnixMilli(l.StartUnixMs), Duration: time.Duration(l.DurationSeconds) * time.Second, Tier: l.Tier, PriceMicros: l.PriceMicros}
		if r.Start.Before(now) {
			r.Start = now // within the skew: the calendar starts it now
		}
		if renter := peer.ID(l.Renter); lo.Holds != nil && !lo.Holds.Known(renter) {
			if herr := cal.CheckHolds(r, lo.Holds.limit(cal.Slots()), lo.Holds.newcomers(st), now); herr != nil {
				err = market.Reject(pb.RejectCode_REJECT_RENTER_LIMIT, "renter %s has no history here (no receipt or trust path): %s; this provider's new_renter_share is %.2f", renter, reasonOf(herr), lo.Holds.Share)
				return
			}
		}
		d, aerr := cal.Admit(r, now)
		if aerr == nil {
			_, aerr = cal.Commit(r, d, now)
		}
		if aerr != nil {
			err = lo.refusal(cal, r, aerr, now)
			return
		}
		st.admitting[l.Id] = &admission{renter: peer.ID(l.Renter), body: cs.Body, channel: channelOf(l), settled: make(chan struct{})}
		res = reservation{model: model, start: r.Start, decision: d}
	})
	if derr != nil {
		err = market.Reject(pb.RejectCode_REJECT_INTERNAL, "%v", derr)
	}
	return res, wait, err
}

// heldBy counts what renter holds here at now: its leases admitted or
// being admitted and not ended, and the receipts it left unsigned within
// unsignedMemory (older ones are forgotten here).
func (st *State) heldBy(renter peer.ID, now time.Time) (open, unsigned int) {
	for _, ll := range st.Live {
		if peer.ID(ll.lease.Renter) == renter {
			open++
		}
	}
	for _, a := range st.admitting {
		if a.renter == renter {
			open++
		}
	}
	for id, u := range st.unsigned {
		switch {
		case now.Sub(u.end) >= unsignedMemory:
			delete(st.unsigned, id)
		case u.renter == renter:
			unsigned++
		}
	}
	return open, unsigned
}

// closed is a channel that is always closed.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// refusal answers a calendar refusal. A lease that would fit once bronze
// leases have had their notice is told the earliest start at which it
// would: both sides sign the start, so the renter proposes it anew. One
// that would fit later only because other leases end by then is not: that
// is no preemption, and the renter may find GPUs free now elsewhere.
func (lo *Owner) refusal(cal *market.Calendar, r market.LeaseRequest, err error, now time.Time) *market.RejectError {
	rej := market.RejectAdmission(err)
	if rej.Code != pb.RejectCode_REJECT_NO_CAPACITY || r.Tier == pb.Tier_TIER_BRONZE {
		return rej
	}
	later := r
	later.Start = now.Add(lo.notice + time.Second).Truncate(time.Millisecond)
	if later.Start.After(r.Start) {
		if d, err := cal.Admit(later, now); err == nil && len(d.Preempt) > 0 {
			rej.EarliestStart = later.Start
		}
	}
	return rej
}

// accept countersigns and stores a reserved lease, outside the owner,
// then commits it in the owner: preempts what the admission decided and
// starts supervising it. On failure it releases the reservation.
func (lo *Owner) accept(ctx context.Context, l *pb.Lease, cs *pb.CoSigned, res reservation) *pb.LeaseReply {
	rec := &records.Lease{ID: l.Id, Role: records.Provider, State: records.Accepted, GPUs: res.decision.GPUIDs, EndMs: market.LeaseEnd(l).UnixMilli()}
	err := market.CoSign[*pb.Lease](lo.key, market.Provider, cs)
	if err == nil {
		rec.Lease, _ = proto.Marshal(cs)
		err = lo.store.Put(ctx, rec, nil)
	}
	if err != nil {
		lo.settle(l.Id, func(st *State) { st.Cals[res.model].Release(l.Id, res.start) })
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "countersign and store: %v", err).Reply()
	}
	lo.settle(l.Id, func(st *State) {
		for _, p := range res.decision.Preempt {
			if ll := st.Live[p.AllocationID]; ll != nil {
				ll.requestStop(stopRequest{outcome: pb.Outcome_OUTCOME_PREEMPTED, note: "preempted by a " + market.TierName(l.Tier) + " lease", at: p.NoticeEnds})
			}
		}
		lo.supervise(st, newLive(lo.clock, l, market.LeaseTerm(l, cs), rec), nil, "")
	})
	lo.log.Info("lease accepted", "lease", l.Id, "renter", peer.ID(l.Renter), "gpus", res.decision.GPUIDs, "tier", market.TierName(l.Tier))
	return &pb.LeaseReply{Lease: cs}
}

// settle ends an admission in the owner with f, whatever the caller's
// context: a reservation is committed or released, never left. A stopped
// owner leaves a stored lease to the next start, which recovers it.
func (lo *Owner) settle(id string, f func(*State)) {
	lo.Do(context.Background(), func(st *State) {
		f(st)
		if a := st.admitting[id]; a != nil {
			close(a.settled)
			delete(st.admitting, id)
		}
	})
}

// cancelFor ends a lease at its renter's request: before its start it is
// dropped, owing nothing; running, its job is stopped.
func (lo *Owner) cancelFor(ctx context.Context, from peer.ID, id string) *pb.LeaseReply {
	cs := lo.StopLease(ctx, id, "cancelled by the renter", from)
	if cs == nil {
		return market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "no running lease %s of yours here", id).Reply()
	}
	return &pb.LeaseReply{Lease: cs}
}

// detachFor lets the renter leave its running lease on purpose: the job
// runs on without a renter attached, to its term or its end, and the
// output and receipt wait for the renter to attach again.
func (lo *Owner) detachFor(ctx context.Context, from peer.ID, id string) *pb.LeaseReply {
	var cs *pb.CoSigned
	lo.Do(ctx, func(st *State) {
		if ll := st.Live[id]; ll != nil && peer.ID(ll.lease.Renter) == from {
			ll.detached.Store(true)
			cs = ll.cs
		}
	})
	if cs == nil {
		return market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "no running lease %s of yours here", id).Reply()
	}
	return &pb.LeaseReply{Lease: cs}
}

// StopLease cancels a live lease now, with note; a renter that is not
// empty must be the lease's. It returns the lease's co-signed terms, or
// nil when no such lease is live here.
func (lo *Owner) StopLease(ctx context.Context, id, note string, renter peer.ID) *pb.CoSigned {
	var cs *pb.CoSigned
	lo.Do(ctx, func(st *State) {
		ll := st.Live[id]
		if ll == nil || renter != "" && peer.ID(ll.lease.Renter) != renter {
			return
		}
		ll.requestStop(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: note, at: lo.clock.Now()})
		cs = ll.cs
	})
	return cs
}

// LiveCount is how many leases are supervised now.
func (lo *Owner) LiveCount() int { return int(lo.nLive.Load()) }

// channelOf is the channel that pays l; empty for none.
func channelOf(l *pb.Lease) string { return string(l.GetPayment().GetChannel()) }

// paying is the lease, live or being admitted, that channel pays; empty
// for none (or no channel).
func (st *State) paying(channel string) string {
	if channel == "" {
		return ""
	}
	for id, ll := range st.Live {
		if channelOf(ll.lease) == channel {
			return id
		}
	}
	for id, a := range st.admitting {
		if a.channel == channel {
			return id
		}
	}
	return ""
}

// chainWait bounds one read of the chain while a lease is admitted.
const chainWait = 10 * time.Second

// checkPayment admits the payment of a lease paid by a channel: this
// provider takes channels, and the chain and its own records agree with
// where the lease says the channel stands (pay.Wallet.Admit).
func (lo *Owner) checkPayment(ctx context.Context, l *pb.Lease) error {
	p := l.GetPayment()
	if p == nil {
		return nil
	}
	if lo.wallet == nil {
		return market.Reject(pb.RejectCode_REJECT_DOES_NOT_FIT, "payment: %v", pay.ErrNoWallet)
	}
	recs, err := lo.store.All(ctx)
	if err != nil {
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "lease store: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, chainWait)
	defer cancel()
	if err := lo.wallet.Admit(ctx, l, pay.Tip(recs, common.BytesToHash(p.GetChannel()))); err != nil {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "%v", err)
	}
	return nil
}
