package records

import (
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
