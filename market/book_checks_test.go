package market

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// What the book's state machine (book_machine_test.go) checks after its
// steps: the book's keys, counts and buckets after every one; after a
// snapshot, the snapshot whole, its index, listings and matches.

// check compares what the book holds with the model without a snapshot
// (one would publish the buckets and hide what builds up between
// snapshots): the stamp and message of every key the step changed (of
// every key, where all), the counts, and every bucket's live count and
// backlog.
func (m *bookMachine) check(all bool) {
	m.t.Helper()
	b := m.book
	b.mu.Lock()
	defer b.mu.Unlock()
	sameKeys(m, "offer", &b.offers, &m.offers, all, func(e *offerEntry, o *pb.Offer) bool { return holdsOffer(e, o) })
	sameKeys(m, "bid", &b.bids, &m.bids, all, func(e *bidEntry, x *pb.Bid) bool { return e.bid == x })
	if b.nOffers != m.offers.nLive || b.nBids != m.bids.nLive {
		m.fatalf("the book counts %d live offers and %d bids; the model %d and %d", b.nOffers, b.nBids, m.offers.nLive, m.bids.nLive)
	}
	for _, r := range []struct {
		kind string
		room *room
		held [ranks]int
	}{{"offer", &b.offerRoom, m.offers.held}, {"bid", &b.bidRoom, m.bids.held}} {
		if r.room.held != r.held {
			m.fatalf("the book's %s room holds %v keys by rank; the model %v", r.kind, r.room.held, r.held)
		}
		if n := r.room.total(); r.room.max > 0 && n > r.room.max {
			m.fatalf("the book holds %d %s keys, over its limit %d", n, r.kind, r.room.max)
		}
	}
	if len(b.buckets) != len(b.order) {
		m.fatalf("%d buckets by key, %d in order", len(b.buckets), len(b.order))
	}
	n := 0
	for i, bk := range b.order {
		if b.buckets[bk.key] != bk || i > 0 && compareBuckets(b.order[i-1].key, bk.key) >= 0 {
			m.fatalf("bucket %v out of place", bk.key)
		}
		if bk.live != m.buckets[bk.key] {
			m.fatalf("bucket %v counts %d live; the model %d", bk.key, bk.live, m.buckets[bk.key])
		}
		if len(bk.removed) > bk.live+32 {
			m.fatalf("bucket %v holds %d removed for %d live", bk.key, len(bk.removed), bk.live)
		}
		if bk.live > 0 {
			n++
		}
	}
	if n != len(m.buckets) {
		m.fatalf("%d buckets hold offers; the model %d", n, len(m.buckets))
	}
}

// sameKeys compares the book's entries of one kind with the model's: of
// the keys the model touched since the last check, or of all.
func sameKeys[V comparable, M comparable](m *bookMachine, kind string, s *shardSet[V], model *modelSide[M], all bool, holds func(V, M) bool) {
	m.t.Helper()
	var zero V
	var zeroMsg M
	same := func(k bookKey, e V) {
		want := model.keys[k]
		switch {
		case e == zero && want == nil:
		case e == zero || want == nil:
			m.fatalf("%s %s: the book remembers it %v; the model %v", kind, shortKey(k), e != zero, want != nil)
		default:
			if st := any(e).(interface{ stampOf() *stamp }).stampOf(); *st != want.stamp || !holds(e, want.msg) {
				m.fatalf("%s %s: the book holds %+v; the model %+v (live %v)", kind, shortKey(k), *st, want.stamp, want.msg != zeroMsg)
			}
		}
	}
	for _, k := range model.touched {
		same(k, s.get(k))
	}
	model.touched = model.touched[:0]
	if !all {
		return
	}
	n := 0
	for _, sh := range s {
		if sh != nil {
			for k, e := range sh.m {
				n++
				same(k, e)
			}
		}
	}
	if n != len(model.keys) {
		m.fatalf("the book remembers %d %s keys; the model %d", n, kind, len(model.keys))
	}
}

func compareBuckets(a, b bucketKey) int {
	return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.country, b.country))
}

// countBuckets counts o by n in each bucket it belongs in: one per
// canonical model of its groups, in its country.
func (m *bookMachine) countBuckets(o *pb.Offer, n int) {
	for _, model := range m.canonicalModels(o) {
		k := bucketKey{model, o.GetRegion().GetCountry()}
		if m.buckets[k] += n; m.buckets[k] == 0 {
			delete(m.buckets, k)
		}
	}
}

// canonicalModels lists the canonical models of o's groups, each once.
func (m *bookMachine) canonicalModels(o *pb.Offer) []string {
	if ms, ok := m.canonical[o]; ok {
		return ms
	}
	var out []string
	for _, g := range o.GetGpus() {
		if model := gpus.Default().Canonical(g.GetModel()); !slices.Contains(out, model) {
			out = append(out, model)
		}
	}
	m.canonical[o] = out
	return out
}

// snapshot takes a snapshot and checks it whole against the model: its
// offers and bids, every index bucket, every probe chunk; and that the
// snapshot held from before still shows what it showed.
func (m *bookMachine) snapshot() *Snapshot {
	m.t.Helper()
	s := m.book.Snapshot()
	m.logf("snapshot")
	live := m.offers.live()
	if s.Len() != len(live) || !sameOffers(s.Offers(), live) {
		m.fatalf("the snapshot lists %d offers; the model %d", s.Len(), len(live))
	}
	if bids := m.bids.live(); s.NumBids() != len(bids) || !slices.Equal(s.Bids(), bids) {
		m.fatalf("the snapshot lists %d bids; the model %d", s.NumBids(), len(bids))
	}
	for k, e := range m.offers.keys {
		if o, ok := s.Offer(k.issuer, k.id); ok != (e.msg != nil) || ok && !proto.Equal(o, e.msg) {
			m.fatalf("snapshot's offer %s: %v; the model's %v", shortKey(k), o, e.msg)
		}
	}
	for k, e := range m.bids.keys {
		if x, ok := s.Bid(k.issuer, k.id); ok != (e.msg != nil) || x != e.msg {
			m.fatalf("snapshot's bid %s: %v; the model's %v", shortKey(k), x, e.msg)
		}
	}
	m.checkIndex(s, live)
	if m.held != nil {
		if !sameOffers(m.held.Offers(), m.heldAt) || !slices.EqualFunc(m.held.views, m.heldViews, sameView) {
			m.fatalf("a snapshot changed after it was taken")
		}
	}
	return s
}

// hold keeps s and a copy of what it shows, to check later that it
// still shows that.
func (m *bookMachine) hold(s *Snapshot) {
	m.held, m.heldAt, m.heldViews = s, m.offers.live(), nil
	for _, v := range s.views {
		c := &bucketView{model: v.model, country: v.country}
		for t := range v.tiers {
			c.tiers[t] = slices.Clone(v.tiers[t])
		}
		for _, ch := range v.chunks {
			c.chunks = append(c.chunks, &probeChunk{probes: slices.Clone(ch.probes)})
		}
		m.heldViews = append(m.heldViews, c)
	}
}

// sameView says whether v shows what its copy c showed.
func sameView(v, c *bucketView) bool {
	if v.model != c.model || v.country != c.country || len(v.chunks) != len(c.chunks) {
		return false
	}
	for t := range v.tiers {
		if !slices.Equal(v.tiers[t], c.tiers[t]) {
			return false
		}
	}
	for i, ch := range v.chunks {
		if !slices.Equal(ch.probes, c.chunks[i].probes) {
			return false
		}
	}
	return true
}

// checkIndex checks every bucket view of s against the model's live
// offers (live, in key order): one view per bucket that holds offers,
// counting them; each tier's list in order of price and key, each item
// a live offer of the bucket's model and country, in that tier, at its
// price, and as many items as the offers have (bucket, tier) pairs; the
// probe chunks in key order, within their size, one probe for each
// offer of the bucket.
func (m *bookMachine) checkIndex(s *Snapshot, live []*pb.Offer) {
	m.t.Helper()
	items := 0
	for _, o := range live {
		tiers := 0
		for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
			if slices.Contains(o.GetTiers(), t) {
				tiers++
			}
		}
		items += tiers * len(m.canonicalModels(o))
	}
	liveOffer := func(k bookKey) *pb.Offer {
		if e := m.offers.keys[k]; e != nil {
			return e.msg
		}
		return nil
	}
	if len(s.views) != len(m.buckets) {
		m.fatalf("%d views; the model has %d buckets", len(s.views), len(m.buckets))
	}
	got := 0
	for i, v := range s.views {
		bk := bucketKey{v.model, v.country}
		if i > 0 && compareBuckets(bucketKey{s.views[i-1].model, s.views[i-1].country}, bk) >= 0 {
			m.fatalf("views out of order at %v", bk)
		}
		if v.n != m.buckets[bk] {
			m.fatalf("view %v counts %d offers; the model %d", bk, v.n, m.buckets[bk])
		}
		for t, list := range v.tiers {
			for j, it := range list {
				o := liveOffer(it.e.key)
				if o == nil || !holdsOffer(it.e, o) || !slices.Contains(o.GetTiers(), pb.Tier(t)) || o.GetRegion().GetCountry() != v.country ||
					!slices.Contains(m.canonicalModels(o), v.model) || it.price != TierPrice(o, pb.Tier(t)) {
					m.fatalf("view %v tier %d lists %s at %d, which the model does not", bk, t, shortKey(it.e.key), it.price)
				}
				if j > 0 && compareItems(list[j-1], it) >= 0 {
					m.fatalf("view %v tier %d is out of order at %d", bk, t, j)
				}
			}
			got += len(list)
		}
		n := 0
		var last *probe
		for j, c := range v.chunks {
			if len(c.probes) == 0 || len(c.probes) > 2*chunkProbes {
				m.fatalf("view %v chunk %d holds %d probes", bk, j, len(c.probes))
			}
			for p := range c.probes {
				r := &c.probes[p]
				if last != nil && compareProbes(*last, *r) >= 0 || liveOffer(r.e.key) == nil || !holdsOffer(r.e, liveOffer(r.e.key)) {
					m.fatalf("view %v chunk %d probe %d (%s) out of order or not live", bk, j, p, shortKey(r.e.key))
				}
				last = r
			}
			n += len(c.probes)
		}
		if n != v.n {
			m.fatalf("view %v holds %d probes for %d offers", bk, n, v.n)
		}
		if !slices.IsSortedFunc(v.unsure, compareUnsure) {
			m.fatalf("view %v: unsure probes out of order", bk)
		}
	}
	if got != items {
		m.fatalf("the views list %d (bucket, offer, tier) items; the model's offers have %d", got, items)
	}
}

// find lists offers through the snapshot's index with a filter c draws
// and compares the listing with a scan of the model.
func (m *bookMachine) find(c chooser, s *Snapshot) {
	m.t.Helper()
	f := OfferFilter{
		GPUModel:       machineFilters[c.choose("f_model", len(machineFilters))],
		MinVRAMBytes:   oneOf[uint64](c, "f_vram", 0, 40<<30, 80<<30),
		Country:        oneOf(c, "f_country", "", "DE", "US"),
		MaxPriceMicros: oneOf[uint64](c, "f_price", 0, 1_000_000, 2_000_000),
		Tier:           oneOf(c, "f_tier", pb.Tier_TIER_UNSPECIFIED, pb.Tier_TIER_GOLD, pb.Tier_TIER_BRONZE),
		SortBy:         oneOf(c, "f_sort", "price", "vram", "expiry", ""),
	}
	got, want := s.FindOffers(f), findScan(m.offers.live(), f)
	m.logf("find %+v: %d", f, len(got))
	if !sameOffers(got, want) {
		m.fatalf("FindOffers(%+v) lists %d offers; the scan %d:\n%s\n%s", f, len(got), len(want), offerIDs(got), offerIDs(want))
	}
}

func offerIDs(os []*pb.Offer) string {
	var ids []string
	for _, o := range os {
		ids = append(ids, shortKey(keyOf(o.GetHeader())))
	}
	return strings.Join(ids, " ")
}

// match matches a bid c draws through the snapshot's index and compares
// the candidates with a scan of the model's offers, each checked alone
// with Feasible; and Explain, which reads the probes, with a scan of the
// snapshot's offers.
func (m *bookMachine) match(c chooser) {
	m.t.Helper()
	s := m.snapshot()
	bid := machineBid(c, machineIssuers[0].id, "match", 1, m.now)
	now := m.now.Add(oneOf(c, "match_later", 0, 20*time.Minute, 3*time.Hour))
	k := c.choose("k", 6)
	res := m.matcher.Match(s, bid, now, k)
	m.logf("match k %d: %s", k, candidateIDs(res.Candidates))
	if got, want := candidateIDs(res.Candidates), candidateIDs(m.matchScan(bid, now, k)); got != want {
		m.fatalf("Match: %q; the scan of the model: %q", got, want)
	}
	if ex, want := m.matcher.Explain(s, bid, now), scanExplain(m.matcher, s, bid, now); !equalExplanations(ex, want) {
		m.fatalf("Explain:\n%+v\nthe scan's:\n%+v", ex, want)
	}
}

// matchScan is Match as a scan of the model's live offers, each checked
// alone as Feasible checks it (with the bid's plan made once).
func (m *bookMachine) matchScan(bid *pb.Bid, now time.Time, k int) []Candidate {
	var all []Candidate
	p := m.matcher.plan(bid, now)
	for _, o := range m.offers.live() {
		e := &offerEntry{offerFacts: factsOf(o), key: keyOf(o.GetHeader())}
		if c, failed := m.matcher.evaluate(new(evalCtx), e, o, p, false); failed < 0 {
			all = append(all, c)
		}
	}
	slices.SortFunc(all, func(a, b Candidate) int { return compareCandidates(&a, &b) })
	if !p.split { // a provider once: its best offer
		seen := map[peer.ID]bool{}
		all = slices.DeleteFunc(all, func(c Candidate) bool {
			dup := seen[c.Issuer]
			seen[c.Issuer] = true
			return dup
		})
	}
	if k > 0 && len(all) > k {
		all = all[:k]
	}
	return all
}

// holdsOffer says whether e holds o: a tombstone holds nil, a live entry
// the offer its bytes decode to.
func holdsOffer(e *offerEntry, o *pb.Offer) bool {
	if !e.live() || o == nil {
		return !e.live() && o == nil
	}
	return proto.Equal(e.decode(), o)
}

// sameOffers says whether a and b list equal offers in one order: the
// book decodes a fresh copy for each reader.
func sameOffers(a, b []*pb.Offer) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Offer) bool { return proto.Equal(x, y) })
}

// sameCandidate says whether a and b are the same offer's, for as many
// GPUs at the same rank.
func sameCandidate(a, b Candidate) bool {
	return proto.Equal(a.Offer(), b.Offer()) && a.GPUs == b.GPUs && a.EffectivePriceMicros == b.EffectivePriceMicros
}
