package renter

import (
	"errors"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// isRefusal reports whether err is a provider's refusal of a lease: an
// answer, unlike a provider that could not be reached.
func isRefusal(err error) bool {
	var re *market.RejectError
	return errors.As(err, &re)
}

// failedAt remembers a failed attempt: a provider that could not be
// reached, attested or answer ranks behind the rest for failMemory, and
// one that could not be reached counts against its reputation.
func (r *Renter) failedAt(at Attempt) {
	var tooBig *p2p.UploadRefusedError // a refused upload is no failure of the provider's
	if (at.Stage != StageNegotiate || !isRefusal(at.Err)) && !errors.Is(at.Err, ErrNotAttestable) && !errors.As(at.Err, &tooBig) {
		r.failed.add(at.Provider, r.Clock.Now())
	}
	if at.Stage == StageLocate && r.Observe != nil { // an attestation counts on its own
		r.Observe(at.Provider, false, reputation.WeightUnreachable, "not reachable: "+at.Err.Error())
	}
}

// failures remembers the providers a rental could not reach, attest or
// get an answer from, for failMemory: later rentals try them last. It
// holds at most maxFailures, dropping the oldest.
type failures struct {
	mu sync.Mutex // guards at: no I/O under it
	at map[peer.ID]time.Time
}

const maxFailures = 4096

func (f *failures) add(p peer.ID, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[peer.ID]time.Time{}
	}
	f.at[p] = now
	if len(f.at) > maxFailures {
		oldest, when := peer.ID(""), now
		for q, t := range f.at {
			if t.Before(when) || now.Sub(t) >= failMemory {
				oldest, when = q, t
			}
		}
		delete(f.at, oldest)
	}
}

// lately reports whether p failed within failMemory of now.
func (f *failures) lately(p peer.ID, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.at[p]
	return ok && now.Sub(t) < failMemory
}
