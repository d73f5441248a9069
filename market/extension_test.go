package market

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// An extension both sign moves the term's end and its receipt's meter;
// one that skips a seq, shortens the term, names another lease, lacks a
// signature or carries a signature of another domain is refused.
func TestExtendingALeaseTerm(t *testing.T) {
	rk, pk, renter, provider := leaseParties(t)
	l := sampleLease(renter, provider)
	ls, err := NewCoSigned(rk, Renter, l)
	if err != nil || CoSign[*pb.Lease](pk, Provider, ls) != nil {
		t.Fatal(err)
	}
	term := LeaseTerm(l, ls)
	sign := func(e *pb.Extension) *pb.CoSigned {
		t.Helper()
		cs, err := NewCoSigned(rk, Renter, e)
		if err != nil || CoSign[*pb.Extension](pk, Provider, cs) != nil {
			t.Fatal(err)
		}
		return cs
	}
	first := sign(term.NewExtension(90 * time.Minute))
	next, err := term.Extend(first, Renter, Provider)
	if err != nil {
		t.Fatal(err)
	}
	if want := l.DurationSeconds + 5400; next.Lease.DurationSeconds != want || next.Seq != 1 || !next.End().Equal(LeaseEnd(l).Add(90*time.Minute)) {
		t.Errorf("extended term: %d s, seq %d, end %s; want %d s, seq 1", next.Lease.DurationSeconds, next.Seq, next.End(), want)
	}
	if l.DurationSeconds == next.Lease.DurationSeconds {
		t.Error("Extend changed the lease it was given")
	}
	// The receipt meters within the extended term and names it.
	last := next.End().Add(-time.Minute)
	rc := NewReceipt(next.Lease, ls, ReceiptTerms{Outcome: pb.Outcome_OUTCOME_COMPLETED, End: last, LastBeat: last, ExtensionHash: next.ExtensionHash()})
	if rc.MeteredSeconds != next.Lease.DurationSeconds-60 || !bytes.Equal(rc.ExtensionHash, BodyHash(first)) || !bytes.Equal(rc.LeaseHash, BodyHash(ls)) {
		t.Errorf("receipt of the extended term: %d s, extension %x, lease %x", rc.MeteredSeconds, rc.ExtensionHash, rc.LeaseHash)
	}

	renterOnly, _ := NewCoSigned(rk, Renter, next.NewExtension(time.Hour))
	if _, err := next.Extend(renterOnly, Renter, Provider); !errors.Is(err, ErrUnsigned) {
		t.Errorf("an extension the provider did not sign: %v", err)
	}
	skip := next.NewExtension(time.Hour)
	skip.Seq = 3
	shorter := next.NewExtension(time.Hour)
	shorter.DurationSeconds = next.Lease.DurationSeconds
	other := next.NewExtension(time.Hour)
	other.LeaseHash = BodyHash(first)
	huge := next.NewExtension(time.Hour)
	huge.DurationSeconds = MaxTermSeconds + 1
	for name, e := range map[string]*pb.Extension{"a skipped seq": skip, "no longer": shorter, "another lease": other, "past a year and a day": huge} {
		var fe *FieldError
		if _, err := next.Extend(sign(e), Renter, Provider); !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a field error", name, err)
		}
	}
	// A lease's signatures do not verify as an extension's.
	forged := &pb.CoSigned{Body: first.Body, RenterSignature: ls.RenterSignature, ProviderSignature: ls.ProviderSignature}
	if _, err := term.Extend(forged, Renter, Provider); !errors.Is(err, ErrCoSignature) {
		t.Errorf("an extension with the lease's signatures: %v", err)
	}
	if _, err := next.Extend(proto.Clone(first).(*pb.CoSigned), Renter, Provider); err == nil {
		t.Error("the same extension twice")
	}
	// A record keeps the last extension alone: applied to the lease's own
	// term, it sets the term; an older one does not apply after it.
	second := sign(next.NewExtension(time.Hour))
	after, err := term.Apply(second, Renter, Provider)
	if err != nil || after.Seq != 2 || after.Lease.DurationSeconds != l.DurationSeconds+5400+3600 {
		t.Errorf("the second extension applied to the lease's term: seq %d, %d s, %v", after.Seq, after.Lease.DurationSeconds, err)
	}
	if _, err := after.Apply(first, Renter, Provider); err == nil {
		t.Error("an older extension applied after a later one")
	}
}
