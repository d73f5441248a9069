package lease

import (
	"errors"
	"math"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A lease that starts within holdPrompt of now is use, not a hold: its
// renter must attend it (jobs.renter_grace stops it otherwise), as any
// renter must, so a renter with no history may take any free GPU now, for
// as long as it attends. A lease booked to start later holds what lies
// past holdNear: a renter with no history may book the next hours, but
// not the days ahead.
const (
	holdPrompt = time.Minute
	holdNear   = 2 * time.Hour
)

// holdDay is the span whose GPU-hours provider.new_renter_share shares
// out to renters with no history.
const holdDay = 24 * time.Hour

// HoldPolicy bounds what renters with no history here hold of the
// provider's calendars ahead, together: the per-renter cap counts per
// key, and keys cost nothing.
type HoldPolicy struct {
	// Share is provider.new_renter_share: of the GPUs at any instant, and
	// of a day's GPU-hours, what the class may hold past holdNear.
	Share float64
	// Known reports whether a renter has history here (a trust path from
	// this node: a receipt co-signed with it or with a peer it trusts).
	Known func(peer.ID) bool
}

// limit is the class's limit on a calendar of slots GPUs.
func (h *HoldPolicy) limit(slots int) market.HoldLimit {
	return market.HoldLimit{
		Prompt:  holdPrompt,
		Near:    holdNear,
		GPUs:    int(math.Ceil(h.Share * float64(slots))),
		GPUTime: time.Duration(h.Share * float64(slots) * float64(holdDay)),
	}
}

// newcomers reports, of the calendar's allocations by lease ID, those of
// renters with no history here; it asks known once per renter.
func (h *HoldPolicy) newcomers(st *State) func(id string) bool {
	seen := map[peer.ID]bool{}
	return func(id string) bool {
		var renter peer.ID
		switch {
		case st.Live[id] != nil:
			renter = peer.ID(st.Live[id].lease.Renter)
		case st.admitting[id] != nil:
			renter = st.admitting[id].renter
		default:
			return false
		}
		known, ok := seen[renter]
		if !ok {
			known = h.Known(renter)
			seen[renter] = known
		}
		return !known
	}
}

// reasonOf is an admission refusal's reason alone, or the error.
func reasonOf(err error) string {
	var ae *market.AdmissionError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	return err.Error()
}
