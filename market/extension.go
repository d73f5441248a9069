package market

import (
	"bytes"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// MaxTermSeconds bounds a lease's term, however often it is extended: a
// year and a day.
const MaxTermSeconds = 366 * 24 * 3600

// Term is a lease's terms as they stand: the co-signed lease and its last
// co-signed extension (nil, seq 0 for none).
type Term struct {
	Lease  *pb.Lease // with the term's duration
	Signed *pb.CoSigned
	// Extension and its seq set the duration; nil: the lease's own.
	Extension *pb.CoSigned
	Seq       uint32
}

// LeaseTerm is a lease's term before any extension.
func LeaseTerm(l *pb.Lease, ls *pb.CoSigned) Term { return Term{Lease: l, Signed: ls} }

// End is when the term ends.
func (t Term) End() time.Time { return LeaseEnd(t.Lease) }

// ExtensionHash names the extension that set the term, for its receipt;
// nil for none.
func (t Term) ExtensionHash() []byte {
	if t.Extension == nil {
		return nil
	}
	return BodyHash(t.Extension)
}

// NewExtension is the next extension of t, by add (rounded up to whole
// seconds), for the renter to sign.
func (t Term) NewExtension(add time.Duration) *pb.Extension {
	l := t.Lease
	secs := uint64((add + time.Second - 1) / time.Second)
	return &pb.Extension{
		Version: Version, LeaseId: l.Id, LeaseHash: BodyHash(t.Signed), Renter: l.Renter, Provider: l.Provider,
		Seq: t.Seq + 1, DurationSeconds: l.DurationSeconds + secs,
	}
}

// Extend checks the co-signed extension ext, with the signatures of the
// parties in need and any other it has, against t: the same lease and
// parties, the next seq, a longer duration within MaxTermSeconds. It
// returns the term ext sets.
func (t Term) Extend(ext *pb.CoSigned, need ...Party) (Term, error) {
	return t.extend(ext, true, need)
}

// Apply is Extend for an extension that may come after others t has not
// seen: any later seq (a record keeps only the last one; a renter away
// gets only the last one again).
func (t Term) Apply(ext *pb.CoSigned, need ...Party) (Term, error) {
	return t.extend(ext, false, need)
}

func (t Term) extend(ext *pb.CoSigned, strict bool, need []Party) (Term, error) {
	e, err := OpenCoSigned[*pb.Extension](ext, need...)
	if err != nil {
		return t, err
	}
	l := t.Lease
	switch {
	case e.Version != Version:
		return t, invalid("version", "%d; want %d", e.Version, Version)
	case e.LeaseId != l.Id || !bytes.Equal(e.LeaseHash, BodyHash(t.Signed)):
		return t, invalid("lease_hash", "the extension names another lease than %s", clip(l.Id))
	case !bytes.Equal(e.Renter, l.Renter) || !bytes.Equal(e.Provider, l.Provider):
		return t, invalid("renter", "the extension names other parties than lease %s's", clip(l.Id))
	case strict && e.Seq != t.Seq+1:
		return t, invalid("seq", "%d; want %d, the next of lease %s", e.Seq, t.Seq+1, clip(l.Id))
	case e.Seq <= t.Seq:
		return t, invalid("seq", "%d; want more than %d, lease %s's last", e.Seq, t.Seq, clip(l.Id))
	case e.DurationSeconds <= l.DurationSeconds || e.DurationSeconds > MaxTermSeconds:
		return t, invalid("duration_seconds", "%d; want more than the term's %d and at most %d", e.DurationSeconds, l.DurationSeconds, MaxTermSeconds)
	}
	next := proto.Clone(l).(*pb.Lease)
	next.DurationSeconds = e.DurationSeconds
	return Term{Lease: next, Signed: t.Signed, Extension: ext, Seq: e.Seq}, nil
}
