package renter

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A rental's walk is bounded by its try time and ordered by evidence:
// keys cost nothing, so the cheapest offers in a book may all be made up
// by issuers with no host behind them. An issuer this node knows where to
// reach and whose standing attestation, named by hash in its offer, it
// verified ranks first; one that failed lately last; the rest keep the
// matcher's order. The walk looks issuers up a bounded few at a time,
// each within locateLimit, and tries a candidate once it is found and no
// better one is still being looked up within locatePatience: an issuer
// found nowhere costs the walk a share of its try time, and an honest
// provider behind any number of made-up offers is reached.

// evidence is what this node holds of a candidate's issuer before it asks
// the network, best first.
type evidence int

const (
	// evVouched: the node knows where the issuer listens, and verified
	// the standing attestation its offer names by hash.
	evVouched evidence = iota
	// evOther: no such evidence, nor a recent failure.
	evOther
	// evFailed: the issuer could not be reached or attested within
	// failMemory.
	evFailed
)

// byEvidence orders cands by what this node knows of their issuers, each
// class in the matcher's order.
func (r *Renter) byEvidence(cands []market.Candidate, now time.Time) []market.Candidate {
	class := make(map[peer.ID]evidence, len(cands))
	for _, c := range cands {
		class[c.Issuer] = r.evidenceOf(c, now)
	}
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b market.Candidate) int { return int(class[a.Issuer]) - int(class[b.Issuer]) })
	return out
}

// evidenceOf classes one candidate.
func (r *Renter) evidenceOf(c market.Candidate, now time.Time) evidence {
	switch {
	case r.failed.lately(c.Issuer, now):
		return evFailed
	case r.located(c.Issuer) && r.vouched.holds(c.Issuer, c.Offer().GetAttestationHash()):
		return evVouched
	}
	return evOther
}

// located reports whether this node knows where p listens: locating it
// needs no lookup.
func (r *Renter) located(p peer.ID) bool { return r.AddrsOf != nil && len(r.AddrsOf(p)) > 0 }

// maxVouched bounds the issuers whose verified attestation hash a renter
// remembers.
const maxVouched = 4096

// vouchedHashes remembers, per issuer, the hash of the standing
// attestation this node last verified against its offer: an offer naming
// it again is backed by hardware this node has seen answer.
type vouchedHashes struct {
	mu sync.Mutex // guards by: no I/O under it
	by map[peer.ID][]byte
}

// add records that p's standing attestation of hash verified; beyond
// maxVouched an arbitrary other issuer is forgotten.
func (v *vouchedHashes) add(p peer.ID, hash []byte) {
	if len(hash) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by == nil {
		v.by = map[peer.ID][]byte{}
	}
	if _, ok := v.by[p]; !ok && len(v.by) >= maxVouched {
		for q := range v.by {
			delete(v.by, q)
			break
		}
	}
	v.by[p] = bytes.Clone(hash)
}

// holds reports whether hash is the attestation hash verified for p.
func (v *vouchedHashes) holds(p peer.ID, hash []byte) bool {
	if len(hash) == 0 {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return bytes.Equal(v.by[p], hash)
}

// walk tries cands until one leases, and returns its follow and
// candidate; nil when the try time (what left says remains of tryFor)
// ran out or every candidate was tried. Issuers this node knows where to
// reach are found at once; the others are looked up in rank order, at
// most locateAhead at once, each within locateLimit. The walk tries the
// best-ranked candidate found, once no better-ranked one has been looked
// up for less than locatePatience. Each that could not be found goes to
// missed, and counts on one status line: there may be thousands. try gets
// the attempt's context and a channel holding the lookup's outcome.
func (r *Renter) walk(ctx context.Context, cands []market.Candidate, tryFor time.Duration, left func() time.Duration, out RentOutput, missed func(Attempt), try func(context.Context, market.Candidate, <-chan error) (*Follow, Attempt)) (*Follow, market.Candidate) {
	w := newWalkState(cands, r.located)
	results := make(chan lookup, locateAhead) // never more in flight: sends never block
	var wg sync.WaitGroup
	defer wg.Wait()
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	tried, notFound := 0, 0
	attempt := func(i int, err error) *Follow {
		tried++
		if err != nil {
			notFound++
			missed(Attempt{Provider: cands[i].Issuer, Stage: StageLocate, Err: err})
			out.status("%d of %d candidates not found (lately %s: %v); looking up the rest", notFound, len(cands), Short(cands[i].Issuer), err)
			return nil
		}
		outcome := make(chan error, 1)
		outcome <- err
		actx, cancel := context.WithTimeout(ctx, max(0, min(left(), attemptLimit)))
		defer cancel()
		f, _ := try(actx, cands[i], outcome)
		return f
	}
	for {
		for _, i := range w.start(time.Now()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fctx, cancel := context.WithTimeout(lctx, locateLimit)
				defer cancel()
				results <- lookup{i, r.Net.Locate(fctx, cands[i].Issuer)}
			}()
		}
		if left() <= 0 {
			out.say("tried %d of %d candidates in %s; giving up", tried, len(cands), tryFor)
			return nil, market.Candidate{}
		}
		i, wait, done := w.next(time.Now())
		switch {
		case done:
			return nil, market.Candidate{}
		case i >= 0:
			if f := attempt(i, nil); f != nil {
				return f, cands[i]
			}
			continue
		}
		var timeout <-chan time.Time
		t := time.NewTimer(wait)
		if wait > 0 {
			timeout = t.C
		}
		select {
		case l := <-results:
			t.Stop()
			if w.ended(l) {
				if f := attempt(l.i, l.err); f != nil {
					return f, cands[l.i]
				}
			}
		case <-timeout:
		case <-ctx.Done():
			t.Stop()
			return nil, market.Candidate{}
		}
	}
}

// lookup is the outcome of looking up the i-th candidate's issuer.
type lookup struct {
	i   int
	err error
}

// walkState is where a walk stands with each candidate; the walk's own,
// touched by it alone.
type walkState struct {
	n       int
	found   []int             // found, not yet tried, ascending
	pending map[int]time.Time // looked up since
	queue   []int             // to look up, ascending
}

// newWalkState starts a walk over n candidates, those located says it
// knows where to reach found at once.
func newWalkState(cands []market.Candidate, located func(peer.ID) bool) *walkState {
	w := &walkState{n: len(cands), pending: map[int]time.Time{}}
	for i, c := range cands {
		if located(c.Issuer) {
			w.found = append(w.found, i)
		} else {
			w.queue = append(w.queue, i)
		}
	}
	return w
}

// start takes the candidates to look up now, at most locateAhead at once.
func (w *walkState) start(now time.Time) []int {
	var out []int
	for len(w.queue) > 0 && len(w.pending) < locateAhead {
		i := w.queue[0]
		w.queue = w.queue[1:]
		w.pending[i] = now
		out = append(out, i)
	}
	return out
}

// ended takes a lookup's outcome; it reports whether the candidate could
// not be found (the walk records it as tried).
func (w *walkState) ended(l lookup) bool {
	delete(w.pending, l.i)
	if l.err != nil {
		return true
	}
	at, _ := slices.BinarySearch(w.found, l.i)
	w.found = slices.Insert(w.found, at, l.i)
	return false
}

// next is the candidate to try now (-1: none yet), or how long to wait at
// most for a better-ranked lookup before trying the best found (0: for a
// lookup to end); done when nothing is left.
func (w *walkState) next(now time.Time) (i int, wait time.Duration, done bool) {
	if len(w.found) == 0 {
		return -1, 0, len(w.pending) == 0 && len(w.queue) == 0
	}
	best := w.found[0]
	for j, since := range w.pending {
		if j < best {
			if d := locatePatience - now.Sub(since); d > 0 && (wait == 0 || d < wait) {
				wait = d
			}
		}
	}
	if wait > 0 {
		return -1, wait, false
	}
	w.found = w.found[1:]
	return best, 0, false
}
