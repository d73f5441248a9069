package records

import (
	"context"
	"fmt"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// Term is a lease's term as its record rec keeps it: l, co-signed in cs,
// and its last extension when it has one (an extension that does not
// verify is left out, as if never made).
func Term(l *pb.Lease, cs *pb.CoSigned, rec *Lease) (market.Term, error) {
	t := market.LeaseTerm(l, cs)
	if len(rec.Extension) == 0 {
		return t, nil
	}
	ext := new(pb.CoSigned)
	if err := proto.Unmarshal(rec.Extension, ext); err != nil {
		return t, fmt.Errorf("lease %s: stored extension: %w", l.Id, err)
	}
	next, err := t.Apply(ext, market.Renter, market.Provider)
	if err != nil {
		return t, fmt.Errorf("lease %s: stored extension: %w", l.Id, err)
	}
	return next, nil
}

// NoteExtension records ext, an extension of lease id both parties
// signed, in the lease's record when it is later than the one the record
// has: the term's end moves with it. It reports whether the record
// changed. An extension the record has already, or an older one,
// changes nothing; one that does not verify against the lease is an
// error.
func (s Store) NoteExtension(ctx context.Context, id string, ext *pb.CoSigned) (bool, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return false, err
	}
	l, cs, err := rec.Open()
	if err != nil {
		return false, err
	}
	t, err := Term(l, cs, rec)
	if err != nil {
		return false, err
	}
	if t.Extension != nil && market.SameBody(ext, t.Extension) {
		return false, nil
	}
	next, err := t.Apply(ext, market.Renter, market.Provider)
	if err != nil {
		if e, oerr := market.OpenCoSigned[*pb.Extension](ext); oerr == nil && e.Seq <= t.Seq {
			return false, nil // an older one: the record is ahead
		}
		return false, fmt.Errorf("lease %s: extension: %w", id, err)
	}
	if Ended(rec.State) {
		return false, nil // the receipt names the term that held
	}
	rec.Extension, _ = proto.Marshal(ext)
	rec.EndMs = next.End().UnixMilli()
	return true, s.Put(ctx, rec, nil)
}
