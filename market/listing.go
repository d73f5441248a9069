package market

import (
	"cmp"
	"slices"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Listings: the book's offers as a filter selects them, for the offers
// listing and summaries of the market, read through the index.

// OfferFilter selects and orders offers for a listing; a zero field
// selects all.
type OfferFilter struct {
	GPUModel       string
	MinVRAMBytes   uint64 // of a GPU of GPUModel, or of any GPU
	Country        string
	MaxPriceMicros uint64 // for Tier, or for the offer's cheapest tier
	Tier           pb.Tier
	SortBy         string // "price" (the default), "vram" (most first) or "expiry" (soonest first)
	// Where holds the offers to a query, read as a listing shows an
	// offer: its GPU terms on one group that passes the filters above,
	// its other terms on the offer whole (num_gpus counts those GPUs, the
	// host terms read the whole host, price is the listed price); Rel
	// and RTT give reliability and rtt_ms (nil: neutral and unknown).
	Where Query
	Rel   Reliability
	RTT   RTTs
}

// FindOffers lists the offers that pass f, sorted as f asks, then by
// issuer and id. Prices are per GPU-hour for f.Tier, or for the offer's
// cheapest tier when f.Tier is unspecified.
func (s *Snapshot) FindOffers(f OfferFilter) []*pb.Offer {
	type hit struct {
		e           *offerEntry
		price, vram uint64
	}
	var hits []hit
	s.eachHit(f, func(e *offerEntry, _ pb.Tier, price, vram uint64) { hits = append(hits, hit{e, price, vram}) })
	slices.SortFunc(hits, func(a, b hit) int {
		var c int
		switch f.SortBy {
		case "vram":
			c = cmp.Compare(b.vram, a.vram)
		case "expiry":
			c = cmp.Compare(a.e.expires, b.e.expires)
		default:
			c = cmp.Compare(a.price, b.price)
		}
		return cmp.Or(c, compareKeys(a.e.key, b.e.key))
	})
	out := make([]*pb.Offer, len(hits))
	for i, h := range hits {
		out[i] = h.e.decode()
	}
	return out
}

// Listing is an offer as a summary of many reads it, from the book's
// facts: nothing is decoded (Snapshot.Offer decodes one).
type Listing struct {
	Issuer        peer.ID
	ID            string
	Currency      string
	ExpiresUnixMs int64
	PriceMicros   uint64  // per GPU-hour, as FindOffers lists the offer
	Tier          pb.Tier // the tier that sells at PriceMicros
	Model         string  // its first GPU group's, in the catalog's name (Canonical)
	GPUs          uint32  // in all its groups
}

// EachOffer calls visit with each offer that passes f (f.SortBy aside),
// in no order, as a Listing: for a summary of many offers, which needs
// no sorted list of them all and no offer decoded.
func (s *Snapshot) EachOffer(f OfferFilter, visit func(Listing)) {
	s.eachHit(f, func(e *offerEntry, t pb.Tier, price, _ uint64) {
		visit(Listing{Issuer: e.key.issuer, ID: e.key.id, Currency: e.currency, ExpiresUnixMs: e.expiresMs, PriceMicros: price, Tier: t, Model: e.gpus[0].model, GPUs: e.host.gpus})
	})
}

// eachHit calls visit once for each offer that passes f, with its listed
// tier and price and the VRAM of its best GPU of the filter's model.
func (s *Snapshot) eachHit(f OfferFilter, visit func(e *offerEntry, t pb.Tier, price, vram uint64)) {
	seen := make(map[*offerEntry]bool)
	views, accepts := s.views, []gpus.Accept(nil)
	minVRAM := &pb.GPURequirement{MinVramBytes: f.MinVRAMBytes} // the where's GPUs
	if f.GPUModel != "" {
		accepts, views = s.kindsOf(gpus.Default().Expand([]string{f.GPUModel})), nil
		for _, m := range acceptedModels(accepts) {
			views = append(views, s.byModel[m]...)
		}
	}
	for _, v := range views {
		if f.Country != "" && v.country != f.Country {
			continue
		}
		for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
			if f.Tier != pb.Tier_TIER_UNSPECIFIED && t != f.Tier {
				continue
			}
			for _, it := range v.tiers[t] {
				e, price := it.e, it.price
				if f.Tier == pb.Tier_TIER_UNSPECIFIED && cheapestTier(e) != t || f.MaxPriceMicros > 0 && price > f.MaxPriceMicros {
					continue // listed under its cheapest tier, or too dear
				}
				vram := bestGroup(&e.offerFacts, gpuMasksOf(&e.offerFacts, nil, accepts).model, gpuVRAM)
				if vram < f.MinVRAMBytes || seen[e] {
					continue
				}
				if !f.Where.Empty() && !f.Where.listed(e, gpuMasksOf(&e.offerFacts, minVRAM, accepts).vram, price, f.Rel, f.RTT) {
					continue
				}
				if len(e.buckets) > 1 {
					seen[e] = true // listed under another model too
				}
				visit(e, t, price, vram)
			}
		}
	}
}

func cheapestTier(e *offerEntry) pb.Tier {
	best := pb.Tier_TIER_UNSPECIFIED
	for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
		if e.prices[t] != 0 && (best == pb.Tier_TIER_UNSPECIFIED || e.prices[t] < e.prices[best]) {
			best = t
		}
	}
	return best
}
