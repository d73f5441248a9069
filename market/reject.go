package market

import (
	"errors"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"

	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// RejectError is a provider's refusal of a lease: a code a renter can act
// on and the reason in words. Callers test for it with errors.As.
type RejectError struct {
	Code   pb.RejectCode
	Reason string
	// EarliestStart, with REJECT_NO_CAPACITY, is the earliest start at
	// which the lease would fit (zero if none): both sides sign the start,
	// so the renter proposes anew for it.
	EarliestStart time.Time
}

// Reject returns a *RejectError.
func Reject(code pb.RejectCode, format string, a ...any) *RejectError {
	return &RejectError{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// Error reads like "REJECT_PRICE: price 1.50 below this provider's 2.00".
func (e *RejectError) Error() string { return e.Code.String() + ": " + e.Reason }

// Reply is the refusal as the provider sends it.
func (e *RejectError) Reply() *pb.LeaseReply {
	r := &pb.LeaseReply{Code: e.Code, Reason: e.Reason}
	if !e.EarliestStart.IsZero() {
		r.EarliestStartUnixMs = e.EarliestStart.UnixMilli()
	}
	return r
}

// RejectOf is the refusal a reply without a lease carries.
func RejectOf(r *pb.LeaseReply) *RejectError {
	e := &RejectError{Code: r.GetCode(), Reason: r.GetReason()}
	if ms := r.GetEarliestStartUnixMs(); ms > 0 {
		e.EarliestStart = time.UnixMilli(ms)
	}
	if e.Code == pb.RejectCode_REJECT_UNSPECIFIED {
		e.Code = pb.RejectCode_REJECT_INTERNAL
	}
	return e
}

// RejectCode is the lease refusal an admission refusal makes.
func (e *AdmissionError) RejectCode() pb.RejectCode {
	switch e.Code {
	case AdmissionStartInPast:
		return pb.RejectCode_REJECT_START
	case AdmissionNotAvailable:
		return pb.RejectCode_REJECT_NOT_AVAILABLE
	case AdmissionBelowFloor:
		return pb.RejectCode_REJECT_PRICE
	case AdmissionNoCapacity:
		return pb.RejectCode_REJECT_NO_CAPACITY
	}
	return pb.RejectCode_REJECT_BAD_REQUEST
}

// RejectAdmission turns a calendar's refusal into a lease refusal; an
// error that is not an *AdmissionError is internal.
func RejectAdmission(err error) *RejectError {
	var ae *AdmissionError
	if !errors.As(err, &ae) {
		return Reject(pb.RejectCode_REJECT_INTERNAL, "%v", err)
	}
	return Reject(ae.RejectCode(), "%s", ae.Error())
}

// DefaultStartAhead is how far ahead of now a lease may start when its
// offer does not say (max_start_ahead_seconds = 0); MaxStartAhead bounds
// what an offer may say.
const (
	DefaultStartAhead = 7 * 24 * time.Hour
	MaxStartAhead     = 366 * 24 * time.Hour
)

// StartAheadOf is how far ahead of now a lease on offer o may start.
func StartAheadOf(o *pb.Offer) time.Duration {
	if s := o.GetMaxStartAheadSeconds(); s > 0 {
		return time.Duration(min(s, uint64(MaxStartAhead.Seconds()))) * time.Second
	}
	return DefaultStartAhead
}

// LeaseStartSkew is how far in the past a proposed start may be: clocks
// differ and a proposal takes a round trip.
const LeaseStartSkew = 30 * time.Second

// AdmitLease applies a provider's terms to lease l, proposed at now,
// against its offer o (nil when it has none): the offer the lease names,
// the start, the duration, every check of m against the offer, and the
// price. It returns the model of the offer's GPU group the lease takes,
// or a *RejectError. The offer's image rules need an engine to apply in
// full (an image named by ID, deny by digest), and the calendar's state
// an owner: both are the caller's.
func AdmitLease(m *Matcher, o *pb.Offer, l *pb.Lease, now time.Time) (string, error) {
	if start := time.UnixMilli(l.StartUnixMs); start.Before(now.Add(-LeaseStartSkew)) {
		return "", Reject(pb.RejectCode_REJECT_START, "start %s is in the past", start.UTC().Format(time.RFC3339))
	}
	if o == nil || o.Withdrawn || o.Header.GetId() != l.OfferId {
		return "", Reject(pb.RejectCode_REJECT_NO_OFFER, "no offer %q here now", l.OfferId)
	}
	if ahead := StartAheadOf(o); time.UnixMilli(l.StartUnixMs).After(now.Add(ahead)) {
		return "", Reject(pb.RejectCode_REJECT_START, "start %s is more than %s ahead; this provider books at most that far ahead", time.UnixMilli(l.StartUnixMs).UTC().Format(time.RFC3339), ahead)
	}
	if d := l.DurationSeconds; d < o.MinDurationSeconds || d > o.MaxDurationSeconds {
		return "", Reject(pb.RejectCode_REJECT_DURATION, "duration %s outside this offer's %s to %s", seconds(d), seconds(o.MinDurationSeconds), seconds(o.MaxDurationSeconds))
	}
	// The bid, pinned to the lease's start: the offer must fit it then.
	// Its image is left to the caller's rules, which normalise names and
	// know image IDs; the matcher's image check is a renter's pre-filter.
	bid := proto.Clone(l.Bid).(*pb.Bid)
	bid.EarliestStartUnixMs, bid.LatestStartUnixMs = max(l.StartUnixMs, now.UnixMilli()), max(l.StartUnixMs, now.UnixMilli())
	bid.Image = ""
	c, why := m.Feasible(o, bid, now)
	if why != nil {
		return "", Reject(pb.RejectCode_REJECT_DOES_NOT_FIT, "%s", why)
	}
	if c.GPUs != l.GpuCount && Take(o, l.GpuCount, l.GpuCount) != l.GpuCount {
		return "", Reject(pb.RejectCode_REJECT_DOES_NOT_FIT, "%d GPUs: this offer sells %s", l.GpuCount, division(o))
	}
	if err := admitPayment(o, l); err != nil {
		return "", err
	}
	if l.PriceMicros < c.PriceMicros {
		return "", Reject(pb.RejectCode_REJECT_PRICE, "price %s below this provider's %s per GPU-hour", FormatPrice(l.PriceMicros), FormatPrice(c.PriceMicros))
	}
	cat := gpus.Default()
	// The lease's GPUs are of one model, in one or several groups, as
	// the matcher counts them.
	accepts := cat.Expand(bid.Gpu.Models)
	supply := map[string]uint32{}
	for _, g := range o.Gpus {
		model := cat.CanonicalFor(g.Model, g.VramBytes)
		if gpus.Accepts(accepts, model, cat.KindOf(model), cat.MarketedBytes(model, g.VramBytes)) {
			if supply[model] += g.Count; supply[model] >= l.GpuCount {
				return g.Model, nil
			}
		}
	}
	return "", Reject(pb.RejectCode_REJECT_NO_CAPACITY, "no %d GPUs of one model here", l.GpuCount)
}

// division says how an offer's GPUs divide among leases.
func division(o *pb.Offer) string {
	switch {
	case o.GetGpusWhole():
		return "its GPUs whole"
	case o.GetGpuStep() > 1:
		return fmt.Sprintf("GPUs in steps of %d", o.GetGpuStep())
	}
	return "any count of GPUs"
}
