package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// leaseStartSkew is how far in the past a proposed start may be: clocks
// differ and a proposal takes a round trip.
const leaseStartSkew = 30 * time.Second

// leaseManager is the provider's side of leases: it admits proposals
// against its offer and calendar, countersigns them, runs their jobs
// through the executor, meters them and co-signs their receipts. Its
// mutex guards the calendars and the live leases; the datastore holds
// every lease, so a restarted provider picks up where it was.
type leaseManager struct {
	n     *Node
	exec  executor.Executor // nil: jobs.executor = none
	store leaseStore
	ctx   context.Context // ends when the node closes
	wg    sync.WaitGroup

	mu   sync.Mutex
	cals map[string]*market.Calendar // by GPU model
	live map[string]*liveLease
}

// liveLease is a lease the provider supervises now.
type liveLease struct {
	lease *pb.Lease
	cs    *pb.CoSigned
	rec   *leaseRecord // written only by the lease's supervisor
	out   *jobOutput
	stop  chan stopRequest // to the supervisor
	done  chan struct{}    // closed when the supervisor returns
	// off is closed once the lease has ended and its job is gone from
	// the GPUs (stopped and removed).
	off chan struct{}
}

// stopRequest ends a live lease with an outcome, at a time (a preemption
// gives notice: at lies ahead) or now.
type stopRequest struct {
	outcome pb.Outcome
	note    string
	at      time.Time
}

// newLeaseManager builds the calendars from the provider's GPUs: each
// GPU UUID is a slot (static GPUs get numbered slots).
func newLeaseManager(ctx context.Context, n *Node, exec executor.Executor, inv *attest.Inventory) (*leaseManager, error) {
	lm := &leaseManager{n: n, exec: exec, store: n.leaseStore(), ctx: ctx, cals: map[string]*market.Calendar{}, live: map[string]*liveLease{}}
	slots := map[string][]string{}
	if inv != nil {
		for _, g := range inv.GPUs {
			if share := n.cfg.Provider.Share; len(share) == 0 || slices.Contains(share, g.UUID) || slices.Contains(share, fmt.Sprint(g.Index)) {
				m := attest.ModelOf(g.Name)
				slots[m] = append(slots[m], g.UUID)
			}
		}
	}
	for _, g := range n.cfg.Provider.GPUs {
		for range g.Count {
			slots[g.Model] = append(slots[g.Model], fmt.Sprintf("%s-%d", strings.ToLower(g.Model), len(slots[g.Model])))
		}
	}
	o, err := n.cfg.Provider.BuildOffer(n.host.ID(), 0, time.Now())
	if err != nil {
		return nil, err
	}
	for model, ids := range slots {
		c, err := market.NewCalendar(ids, market.Availability{Weekly: o.Weekly}, n.cfg.Provider.BronzeNotice.Std())
		if err != nil {
			return nil, err
		}
		lm.cals[model] = c
	}
	return lm, nil
}

// reject is a refusal with its code.
func reject(code pb.RejectCode, format string, a ...any) *pb.LeaseReply {
	return &pb.LeaseReply{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// handle answers one lease request from a renter.
func (lm *leaseManager) handle(ctx context.Context, from peer.ID, req *pb.LeaseRequest) *pb.LeaseReply {
	switch k := req.Kind.(type) {
	case *pb.LeaseRequest_Propose:
		return lm.propose(ctx, from, k.Propose)
	case *pb.LeaseRequest_CancelLeaseId:
		return lm.cancel(from, k.CancelLeaseId)
	}
	return reject(pb.RejectCode_REJECT_BAD_REQUEST, "empty lease request")
}

// propose admits a lease the renter signed, or says why not. A proposal
// already accepted is answered with the same countersigned lease.
func (lm *leaseManager) propose(ctx context.Context, from peer.ID, cs *pb.CoSigned) *pb.LeaseReply {
	l, err := market.OpenCoSigned[*pb.Lease](cs, market.Renter)
	if err == nil {
		err = market.DefaultLimits().ValidateLease(l)
	}
	switch {
	case err != nil:
		return reject(pb.RejectCode_REJECT_BAD_REQUEST, "%v", err)
	case peer.ID(l.Renter) != from:
		return reject(pb.RejectCode_REJECT_BAD_REQUEST, "the lease names renter %s, the proposal came from %s", peer.ID(l.Renter), from)
	case peer.ID(l.Provider) != lm.n.host.ID():
		return reject(pb.RejectCode_REJECT_BAD_REQUEST, "the lease names provider %s, not this one", peer.ID(l.Provider))
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch rec, err := lm.store.get(ctx, l.Id); {
	case err == nil:
		_, held, err := rec.lease()
		if err != nil || !market.SameBody(held, cs) {
			return reject(pb.RejectCode_REJECT_BAD_REQUEST, "lease ID %s already names other terms", l.Id)
		}
		return &pb.LeaseReply{Lease: held}
	case !errors.Is(err, ds.ErrNotFound):
		return reject(pb.RejectCode_REJECT_INTERNAL, "lease store: %v", err)
	}
	now := time.Now()
	cal, rej := lm.check(ctx, l, now)
	if rej != nil {
		return rej
	}
	start := time.UnixMilli(l.StartUnixMs)
	r := market.LeaseRequest{ID: l.Id, GPUs: int(l.GpuCount), Start: start, Duration: time.Duration(l.DurationSeconds) * time.Second, Tier: l.Tier, PriceMicros: l.PriceMicros}
	if r.Start.Before(now) {
		r.Start = now // within the skew: the calendar starts it now
	}
	d, err := cal.Admit(r, now)
	if err == nil {
		_, err = cal.Commit(r, d, now)
	}
	if err != nil {
		return lm.refuse(cal, r, err, now)
	}
	return lm.accept(ctx, l, cs, cal, d)
}

// refuse answers a calendar refusal. A lease that would fit once bronze
// leases have had their notice is told the earliest start at which it
// would: both sides sign the start, so the renter proposes it anew.
func (lm *leaseManager) refuse(cal *market.Calendar, r market.LeaseRequest, err error, now time.Time) *pb.LeaseReply {
	reply := admissionReject(err)
	if reply.Code != pb.RejectCode_REJECT_NO_CAPACITY || r.Tier == pb.Tier_TIER_BRONZE {
		return reply
	}
	later := r
	later.Start = now.Add(lm.n.cfg.Provider.BronzeNotice.Std() + time.Second).Truncate(time.Millisecond)
	if later.Start.After(r.Start) {
		if _, err := cal.Admit(later, now); err == nil {
			reply.EarliestStartUnixMs = later.Start.UnixMilli()
		}
	}
	return reply
}

// accept countersigns an admitted lease, stores it, preempts what the
// admission decided and starts supervising it.
func (lm *leaseManager) accept(ctx context.Context, l *pb.Lease, cs *pb.CoSigned, cal *market.Calendar, d market.Decision) *pb.LeaseReply {
	if err := market.CoSign[*pb.Lease](lm.n.key, market.Provider, cs); err != nil {
		cal.Release(l.Id, time.UnixMilli(l.StartUnixMs))
		return reject(pb.RejectCode_REJECT_INTERNAL, "countersign: %v", err)
	}
	raw, _ := proto.Marshal(cs)
	rec := &leaseRecord{ID: l.Id, Role: roleProvider, State: LeaseAccepted, Lease: raw, GPUs: d.GPUIDs, EndMs: market.LeaseEnd(l).UnixMilli()}
	if err := lm.store.put(ctx, rec, nil); err != nil {
		cal.Release(l.Id, time.UnixMilli(l.StartUnixMs))
		return reject(pb.RejectCode_REJECT_INTERNAL, "lease store: %v", err)
	}
	for _, p := range d.Preempt {
		if ll := lm.live[p.AllocationID]; ll != nil {
			ll.requestStop(stopRequest{outcome: pb.Outcome_OUTCOME_PREEMPTED, note: "preempted by a " + market.TierName(l.Tier) + " lease", at: p.NoticeEnds})
		}
	}
	lm.superviseLocked(newLive(l, cs, rec), nil, "")
	lm.n.log.Info("lease accepted", "lease", l.Id, "renter", peer.ID(l.Renter), "gpus", d.GPUIDs, "tier", market.TierName(l.Tier))
	return &pb.LeaseReply{Lease: cs}
}

// check applies the provider's terms to a proposal: the offer it names,
// start, duration, image rules, an image the executor has, and the
// matcher's every check against the offer; it returns the calendar of
// the GPU model the lease gets.
func (lm *leaseManager) check(ctx context.Context, l *pb.Lease, now time.Time) (*market.Calendar, *pb.LeaseReply) {
	start := time.UnixMilli(l.StartUnixMs)
	if start.Before(now.Add(-leaseStartSkew)) {
		return nil, reject(pb.RejectCode_REJECT_START, "start %s is in the past", start.UTC().Format(time.RFC3339))
	}
	if lm.exec == nil {
		return nil, reject(pb.RejectCode_REJECT_INTERNAL, "this provider runs no jobs (jobs.executor = none)")
	}
	p := lm.n.provider
	o, ok := p.own.Snapshot().Offer(lm.n.host.ID(), ProviderOfferID)
	if !ok || o.Withdrawn || o.Header.Id != l.OfferId {
		return nil, reject(pb.RejectCode_REJECT_NO_OFFER, "no offer %q here now", l.OfferId)
	}
	if d := l.DurationSeconds; d < o.MinDurationSeconds || d > o.MaxDurationSeconds {
		return nil, reject(pb.RejectCode_REJECT_DURATION, "duration %s outside this offer's %s to %s", secs(d), secs(o.MinDurationSeconds), secs(o.MaxDurationSeconds))
	}
	img := l.Workload.Image
	if allow := o.ImageAllow; len(allow) > 0 && !slices.ContainsFunc(allow, func(p string) bool { return strings.HasPrefix(img, p) }) {
		return nil, reject(pb.RejectCode_REJECT_IMAGE, "image %q is not allowed here: allowed are %v", img, allow)
	}
	if i := slices.IndexFunc(o.ImageDeny, func(p string) bool { return strings.HasPrefix(img, p) }); i >= 0 {
		return nil, reject(pb.RejectCode_REJECT_IMAGE, "image %q is refused here (%q)", img, o.ImageDeny[i])
	}
	if err := lm.exec.Check(ctx, lm.spec(l, nil)); err != nil {
		if errors.Is(err, executor.ErrUnknownImage) {
			return nil, reject(pb.RejectCode_REJECT_IMAGE, "%v", err)
		}
		return nil, reject(pb.RejectCode_REJECT_INTERNAL, "%v", err)
	}
	bid := proto.Clone(l.Bid).(*pb.Bid)
	bid.EarliestStartUnixMs, bid.LatestStartUnixMs = max(l.StartUnixMs, now.UnixMilli()), max(l.StartUnixMs, now.UnixMilli())
	snap := p.own.Snapshot()
	res := lm.n.market.matcher.Match(snap, bid, now, 1)
	if len(res.Candidates) == 0 {
		return nil, reject(pb.RejectCode_REJECT_DOES_NOT_FIT, "%s", lm.n.market.matcher.Explain(snap, bid, now).String())
	}
	if c := res.Candidates[0]; l.PriceMicros < c.PriceMicros {
		return nil, reject(pb.RejectCode_REJECT_PRICE, "price %s below this provider's %s per GPU-hour", FormatPrice(l.PriceMicros), FormatPrice(c.PriceMicros))
	}
	for _, g := range o.Gpus {
		if (len(bid.Gpu.Models) == 0 || slices.Contains(bid.Gpu.Models, g.Model)) && g.Count >= l.GpuCount && lm.cals[g.Model] != nil {
			return lm.cals[g.Model], nil
		}
	}
	return nil, reject(pb.RejectCode_REJECT_NO_CAPACITY, "no %d GPUs of one model here", l.GpuCount)
}

// admissionReject turns a calendar refusal into a reply.
func admissionReject(err error) *pb.LeaseReply {
	var ae *market.AdmissionError
	if !errors.As(err, &ae) {
		return reject(pb.RejectCode_REJECT_INTERNAL, "%v", err)
	}
	code := map[market.AdmissionCode]pb.RejectCode{
		market.AdmissionStartInPast:  pb.RejectCode_REJECT_START,
		market.AdmissionNotAvailable: pb.RejectCode_REJECT_NOT_AVAILABLE,
		market.AdmissionBelowFloor:   pb.RejectCode_REJECT_PRICE,
		market.AdmissionNoCapacity:   pb.RejectCode_REJECT_NO_CAPACITY,
	}[ae.Code]
	if code == pb.RejectCode_REJECT_UNSPECIFIED {
		code = pb.RejectCode_REJECT_BAD_REQUEST
	}
	return reject(code, "%s", ae.Error())
}

// cancel ends a lease at its renter's request: before its start it is
// dropped, owing nothing; running, its job is stopped.
func (lm *leaseManager) cancel(from peer.ID, id string) *pb.LeaseReply {
	cs := lm.stopLease(id, "cancelled by the renter", from)
	if cs == nil {
		return reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "no running lease %s of yours here", id)
	}
	return &pb.LeaseReply{Lease: cs}
}

// stopLease cancels a live lease now, with note; a renter that is not
// empty must be the lease's. It returns the lease's co-signed terms, or
// nil when no such lease is live here.
func (lm *leaseManager) stopLease(id, note string, renter peer.ID) *pb.CoSigned {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	ll := lm.live[id]
	if ll == nil || renter != "" && peer.ID(ll.lease.Renter) != renter {
		return nil
	}
	ll.requestStop(stopRequest{outcome: pb.Outcome_OUTCOME_CANCELLED, note: note, at: time.Now()})
	return ll.cs
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

// attach hands a renter's job stream to its lease: live, it follows the
// job; ended, it gets the receipt.
func (lm *leaseManager) attach(from peer.ID, id string, s network.Stream) {
	lm.mu.Lock()
	ll := lm.live[id]
	lm.mu.Unlock()
	if ll != nil && peer.ID(ll.lease.Renter) == from {
		ll.out.attach(s)
		return
	}
	defer s.Close()
	rec, err := lm.store.get(lm.ctx, id)
	if err != nil || rec.Role != roleProvider || len(rec.Receipt) == 0 {
		s.Reset()
		return
	}
	l, _, err := rec.lease()
	if err != nil || peer.ID(l.Renter) != from {
		s.Reset()
		return
	}
	out := newJobOutput(time.Now(), rec.LastEnv)
	out.attach(s)
	lm.collectSignature(rec, out)
}

func secs(s uint64) string { return (time.Duration(s) * time.Second).String() }

// Roles a node plays in a lease.
const (
	roleProvider = "provider"
	roleRenter   = "renter"
)
