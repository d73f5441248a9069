package market

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
)

// The model of the book that its state machine (book_machine_test.go)
// checks it against: a map of what each key holds, and scans.

// modelEntry is what the model holds for a key: what the book must
// remember of it, when it arrived (for eviction), and its message (the
// zero value for a tombstone).
type modelEntry[M comparable] struct {
	stamp
	arrival int
	msg     M
}

// modelSide is the model of one kind of the book's keys. It counts what
// it holds as it changes, and lists the keys it changed for the next
// check.
type modelSide[M comparable] struct {
	max      int
	keys     map[bookKey]*modelEntry[M]
	arrivals int
	nLive    int
	held     [ranks]int
	touched  []bookKey
	changed  func(old, new M) // told of each message that comes or goes
	rank     Ranker           // nil: all RankUnknown
}

// set stores e for k (nil: forgets k).
func (s *modelSide[M]) set(k bookKey, e *modelEntry[M]) {
	var zero M
	oldMsg, newMsg := zero, zero
	if old := s.keys[k]; old != nil {
		oldMsg = old.msg
		s.held[old.rank]--
	}
	if e != nil {
		newMsg = e.msg
		s.held[e.rank]++
		s.keys[k] = e
	} else {
		delete(s.keys, k)
	}
	if oldMsg != zero {
		s.nLive--
	}
	if newMsg != zero {
		s.nLive++
	}
	if oldMsg != newMsg && s.changed != nil {
		s.changed(oldMsg, newMsg)
	}
	s.touched = append(s.touched, k)
}

// put applies the book's rules to a message of header h and content msg
// (zero: a withdrawal) at now: the error the book must give, and the key
// a full book must evict first.
func (s *modelSide[M]) put(h *pb.Header, msg M, now time.Time, horizon int64) (victim *bookKey, err error) {
	k := keyOf(h)
	old := s.keys[k]
	switch {
	case old != nil && h.GetSeq() <= old.seq:
		return nil, ErrStale
	case h.GetExpiresUnixMs() <= now.UnixMilli():
		return nil, ErrExpired
	}
	e := &modelEntry[M]{stamp: stamp{seq: h.GetSeq(), expires: h.GetExpiresUnixMs(), forget: max(h.GetExpiresUnixMs(), h.GetCreatedUnixMs()+horizon)}, msg: msg}
	if old != nil {
		e.rank, e.arrival = old.rank, old.arrival
	} else {
		if s.rank != nil {
			e.rank = int8(s.rank(k.issuer))
		}
		if s.max > 0 && len(s.keys) >= s.max {
			// A full book evicts the last arrival of the lowest rank it
			// holds, for a key that ranks above it.
			low := int8(0)
			for low < ranks-1 && s.held[low] == 0 {
				low++
			}
			if e.rank <= low {
				return nil, ErrBookFull
			}
			var last *modelEntry[M]
			for vk, x := range s.keys {
				if x.rank == low && (last == nil || x.arrival > last.arrival) {
					last, victim = x, &vk
				}
			}
			s.set(*victim, nil)
		}
		s.arrivals++
		e.arrival = s.arrivals
	}
	s.set(k, e)
	return victim, nil
}

// expire turns what expired at now into tombstones and forgets the
// tombstones past their time (not those it made): how many it expired.
func (s *modelSide[M]) expire(now time.Time) int {
	var zero M
	n, nowMs := 0, now.UnixMilli()
	for k, e := range s.keys {
		switch {
		case e.msg != zero && e.expires <= nowMs:
			s.set(k, &modelEntry[M]{stamp: e.stamp, arrival: e.arrival})
			n++
		case e.msg == zero && e.forget <= nowMs:
			s.set(k, nil)
		}
	}
	return n
}

// live lists the live messages in key order.
func (s *modelSide[M]) live() []M {
	var zero M
	ks := slices.SortedFunc(maps.Keys(s.keys), compareKeys)
	out := make([]M, 0, len(ks))
	for _, k := range ks {
		if m := s.keys[k].msg; m != zero {
			out = append(out, m)
		}
	}
	return out
}

// indexable says whether the book indexes o, or refuses it as invalid.
func indexable(o *pb.Offer) bool {
	if o.GetWithdrawn() {
		return true
	}
	return len(o.GetGpus()) > 0 && slices.ContainsFunc(o.GetTiers(), func(t pb.Tier) bool { return t >= pb.Tier_TIER_GOLD && t <= pb.Tier_TIER_BRONZE })
}

// findScan is FindOffers as a scan of every offer: an offer passes if a
// group's model is one the filter's names, in the country, in the tier
// (or listed at its cheapest tier), at most the price, with a group of
// the model of at least the VRAM.
func findScan(offers []*pb.Offer, f OfferFilter) []*pb.Offer {
	type hit struct {
		o           *pb.Offer
		price, vram uint64
	}
	var models []gpus.Accept
	if f.GPUModel != "" {
		models = gpus.Default().Expand([]string{f.GPUModel})
	}
	cat := gpus.Default()
	accepts := func(model string, vram uint64) bool { return gpus.Accepts(models, model, cat.KindOf(model), vram) }
	var hits []hit
	for _, o := range offers {
		if f.Country != "" && o.GetRegion().GetCountry() != f.Country {
			continue
		}
		var vram uint64
		has := false
		for _, g := range o.GetGpus() {
			model := cat.CanonicalFor(g.GetModel(), g.GetVramBytes())
			if v := cat.MarketedBytes(model, g.GetVramBytes()); accepts(model, v) {
				has, vram = true, max(vram, v)
			}
		}
		tier := f.Tier
		if tier == pb.Tier_TIER_UNSPECIFIED {
			for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
				if p := TierPrice(o, t); slices.Contains(o.GetTiers(), t) && p != 0 && (tier == pb.Tier_TIER_UNSPECIFIED || p < TierPrice(o, tier)) {
					tier = t
				}
			}
		}
		price := TierPrice(o, tier)
		if !has || tier < pb.Tier_TIER_GOLD || tier > pb.Tier_TIER_BRONZE || !slices.Contains(o.GetTiers(), tier) || f.MaxPriceMicros > 0 && price > f.MaxPriceMicros || vram < f.MinVRAMBytes {
			continue
		}
		hits = append(hits, hit{o, price, vram})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		var c int
		switch f.SortBy {
		case "vram":
			c = cmp.Compare(b.vram, a.vram)
		case "expiry":
			c = cmp.Compare(a.o.GetHeader().GetExpiresUnixMs(), b.o.GetHeader().GetExpiresUnixMs())
		default:
			c = cmp.Compare(a.price, b.price)
		}
		return cmp.Or(c, compareKeys(keyOf(a.o.GetHeader()), keyOf(b.o.GetHeader())))
	})
	out := make([]*pb.Offer, len(hits))
	for i, h := range hits {
		out[i] = h.o
	}
	return out
}
