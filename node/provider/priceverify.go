package provider

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A provider that follows the market counts only the offers of issuers it
// can trust (Node.pricesFrom), and a provider rarely rents, so it would
// seldom have verified a competitor's attestation. Before it prices, it
// challenges a few of the comparable issuers it cannot count yet, the
// cheapest first: only ones it can locate without a lookup (a made-up
// key has no host to find, and costs nothing here), none that failed
// lately, a bounded few per re-publish within one deadline.
const (
	maxPriceChallenges    = 4                // issuers challenged per re-publish
	priceChallengeWait    = 5 * time.Second  // for all of them together
	priceChallengeBackoff = 30 * time.Minute // before one that failed is asked again
	maxPriceFailures      = 4096             // failures remembered; beyond, the oldest go
)

// PriceVerifier challenges comparable issuers before a market re-price.
type PriceVerifier struct {
	Self      peer.ID
	Book      func() *market.Snapshot
	Counts    func(peer.ID) bool // already counted: Node.pricesFrom
	Located   func(peer.ID) bool // addresses known here
	Challenge func(ctx context.Context, p peer.ID) bool
	Clock     clock.Clock

	mu     sync.Mutex // guards failed; held for no I/O
	failed map[peer.ID]time.Time
}

// Verify challenges, for the offer o is about to be priced as, the
// cheapest comparable issuers that cannot count yet, and waits for the
// answers within priceChallengeWait or ctx.
func (v *PriceVerifier) Verify(ctx context.Context, o *pb.Offer) {
	if v == nil || len(o.GetGpus()) == 0 {
		return
	}
	snap := v.Book()
	if snap == nil {
		return
	}
	now := v.Clock.Now()
	cheapest := map[peer.ID]uint64{}
	snap.EachOffer(market.OfferFilter{GPUModel: o.Gpus[0].Model}, func(l market.Listing) {
		p := l.Issuer
		if p == v.Self || l.Currency != o.Currency || l.ExpiresUnixMs <= now.UnixMilli() {
			return
		}
		if old, ok := cheapest[p]; !ok || l.PriceMicros < old {
			cheapest[p] = l.PriceMicros
		}
	})
	var ask []peer.ID
	for p := range cheapest {
		if !v.failedLately(p, now) && v.Located(p) && !v.Counts(p) {
			ask = append(ask, p)
		}
	}
	slices.SortFunc(ask, func(a, b peer.ID) int { return cmp.Or(cmp.Compare(cheapest[a], cheapest[b]), cmp.Compare(a, b)) })
	if len(ask) > maxPriceChallenges {
		ask = ask[:maxPriceChallenges]
	}
	ctx, cancel := context.WithTimeout(ctx, priceChallengeWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range ask {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !v.Challenge(ctx, p) {
				v.fail(p, now)
			}
		}()
	}
	wg.Wait()
}

func (v *PriceVerifier) failedLately(p peer.ID, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.failed[p]
	return ok && now.Sub(at) < priceChallengeBackoff
}

func (v *PriceVerifier) fail(p peer.ID, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.failed == nil {
		v.failed = map[peer.ID]time.Time{}
	}
	if len(v.failed) >= maxPriceFailures {
		for q, at := range v.failed { // drop what has served its time, else the oldest
			if now.Sub(at) >= priceChallengeBackoff {
				delete(v.failed, q)
			}
		}
		for len(v.failed) >= maxPriceFailures {
			var oldest peer.ID
			var when time.Time
			for q, at := range v.failed {
				if oldest == "" || at.Before(when) {
					oldest, when = q, at
				}
			}
			delete(v.failed, oldest)
		}
	}
	v.failed[p] = now
}
