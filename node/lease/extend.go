package lease

import (
	"context"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// extendWait bounds how long an extension waits for the lease's
// supervisor to record it before the provider answers.
const extendWait = 10 * time.Second

// extendFor answers a renter's extension of its running lease: the
// renter's signature, the next seq, a term within the provider's longest
// lease, GPUs free and offered for the added time at no higher floor than
// the lease's price. Agreed, the provider countersigns it, the calendar
// holds the GPUs to the new end, and the lease's supervisor records it
// (and tells the renter on the job stream) before the answer goes back.
func (lo *Owner) extendFor(ctx context.Context, from peer.ID, cs *pb.CoSigned) *pb.LeaseReply {
	e, err := market.OpenCoSigned[*pb.Extension](cs, market.Renter)
	if err != nil {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "extension: %v", err).Reply()
	}
	var ll *liveLease
	var reply *pb.LeaseReply
	lo.Do(ctx, func(st *State) {
		ll = st.Live[e.LeaseId]
		if ll == nil || peer.ID(ll.lease.Renter) != from {
			reply = market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "no running lease %s of yours here", e.LeaseId).Reply()
			return
		}
		reply = lo.extendLive(st, ll, cs)
	})
	if reply.Extension == nil {
		return reply
	}
	done := make(chan struct{})
	wait, cancel := context.WithTimeout(ctx, extendWait)
	defer cancel()
	select {
	case ll.extended <- done:
	case <-ll.off:
		return market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "lease %s ended", e.LeaseId).Reply()
	case <-wait.Done():
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "lease %s: the extension was not recorded in time", e.LeaseId).Reply()
	}
	select {
	case <-done:
	case <-ll.off:
	case <-wait.Done():
	}
	return reply
}

// extendLive checks and applies an extension to live lease ll, in the
// owner goroutine.
func (lo *Owner) extendLive(st *State, ll *liveLease, cs *pb.CoSigned) *pb.LeaseReply {
	term := *ll.term.Load()
	next, err := term.Extend(cs, market.Renter)
	if err != nil {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "extension: %v", err).Reply()
	}
	o, ok := lo.offer()
	switch {
	case !ok:
		return market.Reject(pb.RejectCode_REJECT_NOT_AVAILABLE, "this provider sells no GPU time now").Reply()
	case next.Lease.DurationSeconds > o.MaxDurationSeconds:
		return market.Reject(pb.RejectCode_REJECT_DURATION, "a term of %s is longer than this provider's longest lease, %s", time.Duration(next.Lease.DurationSeconds)*time.Second, time.Duration(o.MaxDurationSeconds)*time.Second).Reply()
	}
	var held *market.Calendar
	for _, c := range st.Cals {
		if a, ok := c.Allocation(ll.lease.Id); ok {
			if a.End.UnixMilli() < term.End().UnixMilli() { // the calendar keeps sub-millisecond times
				return market.Reject(pb.RejectCode_REJECT_NOT_AVAILABLE, "lease %s ends early, at %s (preempted or cancelled)", ll.lease.Id, a.End.UTC().Format(time.RFC3339)).Reply()
			}
			held = c
		}
	}
	if held == nil {
		return market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "lease %s holds no GPUs here", ll.lease.Id).Reply()
	}
	signed := proto.Clone(cs).(*pb.CoSigned)
	if err := market.CoSign[*pb.Extension](lo.key, market.Provider, signed); err != nil {
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "extension not signed: %v", err).Reply()
	}
	if next, err = term.Extend(signed, market.Renter, market.Provider); err != nil {
		return market.Reject(pb.RejectCode_REJECT_INTERNAL, "extension: %v", err).Reply()
	}
	if err := held.Extend(ll.lease.Id, next.End()); err != nil {
		return market.Reject(pb.RejectCode_REJECT_NO_CAPACITY, "%v", err).Reply()
	}
	ll.term.Store(&next)
	lo.log.Info("lease extended", "lease", ll.lease.Id, "seq", next.Seq, "end", next.End())
	return &pb.LeaseReply{Lease: ll.cs, Extension: signed}
}

// termsFor answers a renter's question for its lease's terms as they
// stand: the co-signed lease and its last extension.
func (lo *Owner) termsFor(ctx context.Context, from peer.ID, id string) *pb.LeaseReply {
	var reply *pb.LeaseReply
	lo.Do(ctx, func(st *State) {
		if ll := st.Live[id]; ll != nil && peer.ID(ll.lease.Renter) == from {
			reply = &pb.LeaseReply{Lease: ll.cs, Extension: ll.term.Load().Extension}
		}
	})
	if reply == nil {
		return market.Reject(pb.RejectCode_REJECT_UNKNOWN_LEASE, "no running lease %s of yours here", id).Reply()
	}
	return reply
}

// extended records the term ll's extension set: the end the supervisor
// waits for, the record, and the renter told on the job stream.
func (r *run) extended(end interface{ Reset(time.Duration) bool }) {
	ll := r.ll
	t := ll.term.Load()
	ll.rec.EndMs = t.End().UnixMilli()
	ll.rec.Extension, _ = proto.Marshal(t.Extension)
	if r.tab != nil { // the vouchers owe to the new end
		r.tab.Lease = t.Lease
	}
	if r.pending == nil { // a stop ahead keeps its time
		end.Reset(r.lo.clock.Until(t.End()))
	}
	r.persist()
	ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Extension{Extension: t.Extension}})
}
