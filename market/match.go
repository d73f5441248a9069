package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Matcher runs the reverse auction of a bid against a book snapshot. It is
// pure and deterministic: the same snapshot, bid, now and sources give the
// same result. It is safe for concurrent use if its sources are.
type Matcher struct {
	cfg MatchConfig
	rel Reliability
	rtt RTTs
	// blindRTT: the source is UnknownRTTs, which judges no max_rtt.
	blindRTT bool
	excl     Excluder
}

// NewMatcher returns a matcher with cfg (a field that fails Validate gets
// its default) and the given sources; nil sources are neutral: every
// provider fully reliable, every RTT unknown.
func NewMatcher(cfg MatchConfig, rel Reliability, rtt RTTs) *Matcher {
	if rel == nil {
		rel = NeutralReliability{}
	}
	if rtt == nil {
		rtt = UnknownRTTs{}
	}
	_, blind := rtt.(UnknownRTTs)
	return &Matcher{cfg: cfg.sanitized(), rel: rel, rtt: rtt, blindRTT: blind}
}

// WithExcluder returns a copy of m that skips the providers x excludes.
func (m *Matcher) WithExcluder(x Excluder) *Matcher {
	c := *m
	c.excl = x
	return &c
}

// Config returns the configuration in effect.
func (m *Matcher) Config() MatchConfig { return m.cfg }

// Result is the outcome of one match.
type Result struct {
	// Candidates are the best K, best first.
	Candidates []Candidate
	// Considered counts the offers the indexes handed to the checks;
	// the rest were cut by model, country, tier or price unseen.
	Considered int
	// Feasible counts the considered offers that passed every check.
	Feasible int

	plan  *bidPlan
	fails [len(feasibilityChecks)]int // considered offers failed, by check
}

// Rejected counts why considered offers failed, most common first.
func (r Result) Rejected() []ReasonCount {
	var out []ReasonCount
	for i, n := range r.fails {
		if n > 0 {
			out = append(out, ReasonCount{Check: feasibilityChecks[i].name, Kind: feasibilityChecks[i].kind(r.plan), Count: n})
		}
	}
	sortReasonCounts(out)
	return out
}

// Reason says why one offer does not fit one bid.
type Reason struct {
	Check  string // the failing check, such as "vram"
	Kind   string // the same for every offer of the bid: "vram below 40 GiB"
	Detail string // this offer's figures: "vram 24 GiB < 40 GiB required"
}

// String reads like "vram: vram 24 GiB < 40 GiB required".
func (r Reason) String() string { return r.Check + ": " + r.Detail }

// ReasonCount is how many offers failed for one reason kind.
type ReasonCount struct {
	Check, Kind string
	Count       int
	// Example is the detail of the nearest such offer: the cheapest for
	// the bid's tier (Explain only).
	Example string
}

// Match returns the k best offers of s for bid at now (every feasible
// offer if k ≤ 0). Candidates come from the snapshot's indexes in rising
// order of tier price; as the effective price is never below the price,
// the walk stops at the first price above the k-th best effective price.
func (m *Matcher) Match(s *Snapshot, bid *pb.Bid, now time.Time, k int) Result {
	p := m.plan(bid, now)
	p.intern(s)
	res := Result{plan: p}
	if k > 0 {
		res.Candidates = make([]Candidate, 0, min(k, 256))
	}
	h := m.cursors(s, p)
	defer h.release()
	ctx := new(evalCtx)
	var seen map[*offerEntry]bool // offers listed under several models
	limit := uint64(math.MaxUint64)
	for len(h.cs) > 0 {
		it := h.top()
		if k > 0 && len(res.Candidates) == k {
			if float64(it.price) > res.Candidates[k-1].EffectivePriceMicros {
				break
			}
			// No price above the k-th effective price is walked.
			limit = uint64(min(res.Candidates[k-1].EffectivePriceMicros, math.MaxUint64/2))
		}
		h.advance(limit)
		if !it.fits(p) {
			continue // past the limit: the walk stops before it counts
		}
		e := it.e
		if len(e.buckets) > 1 {
			if seen[e] {
				continue
			}
			if seen == nil {
				seen = make(map[*offerEntry]bool)
			}
			seen[e] = true
		}
		res.Considered++
		c, failed := m.evaluate(ctx, e.offer, &e.offerFacts, e.key.issuer, p, false)
		if failed >= 0 {
			res.fails[failed]++
			continue
		}
		res.Feasible++
		if !p.split { // a provider once: its best offer
			if j := slices.IndexFunc(res.Candidates, func(x Candidate) bool { return x.Issuer == c.Issuer }); j >= 0 {
				if compareCandidates(&res.Candidates[j], &c) <= 0 {
					continue
				}
				res.Candidates = slices.Delete(res.Candidates, j, j+1)
			}
		}
		res.Candidates = insertRanked(res.Candidates, c, k)
	}
	return res
}

// Feasible runs every check on one offer for bid at now, without the
// indexes. It returns the candidate the offer makes, or the first reason
// it does not fit.
func (m *Matcher) Feasible(o *pb.Offer, bid *pb.Bid, now time.Time) (Candidate, *Reason) {
	p := m.plan(bid, now)
	f := factsOf(o)
	c, failed := m.evaluate(new(evalCtx), o, &f, Issuer(o), p, true)
	if failed < 0 {
		return c, nil
	}
	return Candidate{}, m.reason(o, &f, p, failed)
}

// evaluate runs the pipeline on o with c, which it resets (one context
// serves a whole match, so the hot path does not allocate): the index of
// the first failing check, or -1 and the scored candidate.
func (m *Matcher) evaluate(c *evalCtx, o *pb.Offer, f *offerFacts, issuer peer.ID, p *bidPlan, explain bool) (Candidate, int) {
	*c = evalCtx{m: m, p: p, o: o, f: f, issuer: issuer, explain: explain}
	for i := range feasibilityChecks {
		if !feasibilityChecks[i].fits(c) {
			return Candidate{}, i
		}
	}
	cand := Candidate{
		Offer: o, Issuer: issuer, GPUs: c.gpus, PriceMicros: c.price,
		EffectivePriceMicros: m.cfg.effectivePrice(c.price, c.rel, c.rankRTT()),
		Start:                time.UnixMilli(c.start).UTC(),
		Scores:               m.score(c),
		TotalMicros:          LeaseTotal(c.price, c.gpus, p.bid.GetDurationSeconds()),
		Reliability:          c.rel, RTT: c.rtt, RTTKnown: c.rttKnown, RTTSource: c.rttFrom,
	}
	return cand, -1
}

// reason reruns check i on o to say why it failed.
func (m *Matcher) reason(o *pb.Offer, f *offerFacts, p *bidPlan, i int) *Reason {
	c := evalCtx{m: m, p: p, o: o, f: f, issuer: Issuer(o), explain: true}
	for j := 0; j < i; j++ { // later checks read what earlier ones recorded
		feasibilityChecks[j].fits(&c)
	}
	feasibilityChecks[i].fits(&c)
	return &Reason{Check: feasibilityChecks[i].name, Kind: feasibilityChecks[i].kind(p), Detail: c.detail}
}

// Explanation says, for every offer of a snapshot, whether it fits a bid
// and if not why: each offer counts under the first check it fails.
type Explanation struct {
	Offers   int
	Feasible int
	Reasons  []ReasonCount // most common first
	// Nearest are, when offers failed the model check, the models they
	// have instead: most offers first, at most three.
	Nearest []ModelMiss
}

// ModelMiss is a model the book has where the bid wants another: how
// many offers have it, and the least of their prices for the bid's tier.
type ModelMiss struct {
	Model       string
	Offers      int
	PriceMicros uint64
}

// maxNearest bounds Explanation.Nearest.
const maxNearest = 3

// Explain runs every check on every offer of s for bid at now, and
// counts each offer under the first it fails. It walks the index: a
// bucket (one model in one country) whose bounds show that its offers
// all fail one of the first checks counts whole, without touching them.
// It is for "why did nothing match?" and exact counts, not for ranking.
func (m *Matcher) Explain(s *Snapshot, bid *pb.Bid, now time.Time) Explanation {
	p := m.plan(bid, now)
	p.intern(s)
	p.classes = classIDs.bit(bid.GetWorkloadClass())
	x := explainer{m: m, p: p, near: map[string]*ModelMiss{}, ctx: new(evalCtx), verdicts: make(map[bucketKey]int, len(s.views))}
	verdicts := make([]int, len(s.views))
	for k, v := range s.views {
		verdicts[k] = p.bucketFails(v)
		x.verdicts[bucketKey{v.model, v.country}] = verdicts[k]
	}
	for k, v := range s.views {
		switch i := verdicts[k]; i {
		case bucketMixed:
			for _, c := range v.chunks {
				for j := range c.probes {
					if r := &c.probes[j]; r.flags&probeAway == 0 { // taken here
						x.entry(r.e)
					}
				}
			}
			continue
		case bucketPasses:
			x.probes(v)
		default:
			x.bucket(v, i)
		}
		x.unsure(v, verdicts[k])
	}
	ex := Explanation{Offers: s.Len(), Feasible: x.feasible}
	for i, rc := range x.counts {
		if rc.Count > 0 {
			e := x.example[i]
			r := m.reason(e.offer, &e.offerFacts, p, i)
			rc.Check, rc.Kind, rc.Example = r.Check, r.Kind, r.Detail
			ex.Reasons = append(ex.Reasons, rc)
		}
	}
	sortReasonCounts(ex.Reasons)
	ex.Nearest = nearest(x.near)
	return ex
}

// nearest lists the most common models of near, at most maxNearest.
func nearest(near map[string]*ModelMiss) []ModelMiss {
	var out []ModelMiss
	for _, mm := range near {
		out = append(out, *mm)
	}
	slices.SortFunc(out, func(a, b ModelMiss) int {
		return cmp.Or(cmp.Compare(b.Offers, a.Offers), cmp.Compare(a.PriceMicros, b.PriceMicros), cmp.Compare(a.Model, b.Model))
	})
	return out[:min(len(out), maxNearest)]
}

// What bucketFails says besides a check's index.
const (
	bucketPasses = -1 // its offers of its model only pass every check to region
	bucketMixed  = -2 // its bounds cannot tell
)

// bucketFails returns the check that every offer of v with v's model
// only fails first, as v's bounds show, bucketPasses where those whose
// probes are sure all pass the checks to region, or bucketMixed where
// they may differ. Offers of one model pass or fail the model check
// alike (a known model's groups share its form factor; an unknown one's
// are SXM only where they have NVLink).
func (p *bidPlan) bucketFails(v *bucketView) int {
	hi, lo := &v.hi, &v.lo
	if len(p.models) > 0 && !slices.Contains(p.models, v.model) || hi.flags&p.flags != p.flags {
		return checkModel
	}
	if lo.flags&p.flags != p.flags {
		return bucketMixed
	}
	if hi.vramGiB != math.MaxUint16 && uint64(hi.vramGiB)<<30 < p.minVRAM {
		return checkVRAM
	}
	// lo bounds the offers whose probes are sure: those of one GPU group
	// of the model, of whole GiB; the others run every check.
	if lo.vramGiB != math.MaxUint16 && uint64(lo.vramGiB)<<30 < p.minVRAM {
		return bucketMixed
	}
	if hi.cc != math.MaxUint8 && uint32(hi.cc) < p.minCC {
		return checkCompute
	}
	if lo.cc != math.MaxUint8 && uint32(lo.cc) < p.minCC {
		return bucketMixed
	}
	if !countryAllowed(p, v.country) {
		return checkRegion
	}
	return bucketPasses
}

// explainer gathers an explanation.
type explainer struct {
	m        *Matcher
	p        *bidPlan
	ctx      *evalCtx
	feasible int
	counts   [len(feasibilityChecks)]ReasonCount
	// Each reason's example is its nearest miss: the cheapest offer for
	// the bid's tier that failed it (one that does not sell the tier
	// counts as dearest), the first in key order on a tie.
	example      [len(feasibilityChecks)]*offerEntry
	examplePrice [len(feasibilityChecks)]uint64
	near         map[string]*ModelMiss
	verdicts     map[bucketKey]int // each bucket's bucketFails
}

// tierPrice is e's price for the bid's tier, the most where it has none.
func (x *explainer) tierPrice(e *offerEntry) uint64 {
	if t := x.p.bid.GetTier(); e.offers(t) {
		return e.prices[t]
	}
	return math.MaxUint64
}

// failed counts n offers under check i, with e, whose price for the
// bid's tier is price (tierPrice), as the nearest of them.
func (x *explainer) failed(i, n int, e *offerEntry, price uint64) {
	x.counts[i].Count += n
	if old := x.example[i]; old != nil {
		if c := cmp.Compare(price, x.examplePrice[i]); c > 0 || c == 0 && compareKeys(e.key, old.key) >= 0 {
			return
		}
	}
	x.example[i], x.examplePrice[i] = e, price
}

// probes counts the offers of v, a bucket whose offers with sure probes
// pass every check to region, from their probes: an offer whose probe
// fails a check counts there unread; one that passes up to the price
// runs every check. Within the bucket the first probe of the least price
// that fails a check, in key order, is its nearest; it then vies with
// the other buckets'.
func (x *explainer) probes(v *bucketView) {
	var near [len(feasibilityChecks)]*probe
	var nearPrice [len(feasibilityChecks)]uint64
	t := x.p.bid.GetTier()
	same := v.currency == x.p.bid.GetCurrency()
	for _, c := range v.chunks {
		x.chunk(c, t, same, &near, &nearPrice)
	}
	for i, r := range near {
		if r != nil {
			x.failed(i, 0, r.e, nearPrice[i])
		}
	}
}

// chunk counts the sure probes of c into the explanation, and into near
// each check's nearest of them, for tier t, the bucket's currency being
// the bid's where same.
func (x *explainer) chunk(c *probeChunk, t pb.Tier, same bool, near *[len(feasibilityChecks)]*probe, nearPrice *[len(feasibilityChecks)]uint64) {
	for j := range c.probes {
		r := &c.probes[j]
		if r.flags&probeUnsure != 0 {
			continue // x.unsure's
		}
		switch i := x.p.fails(r, same, uint32(r.gpus)); i {
		case probeAsk, probePass:
			x.entry(r.e)
		default:
			price := uint64(math.MaxUint64)
			if t >= pb.Tier_TIER_GOLD && t <= pb.Tier_TIER_BRONZE && r.prices[t-1] != 0 {
				price = uint64(r.prices[t-1])
			}
			x.counts[i].Count++
			if near[i] == nil || price < nearPrice[i] {
				near[i], nearPrice[i] = r, price
			}
		}
	}
}

// entry runs the checks on e.
func (x *explainer) entry(e *offerEntry) {
	_, i := x.m.evaluate(x.ctx, e.offer, &e.offerFacts, e.key.issuer, x.p, false)
	if i < 0 {
		x.feasible++
		return
	}
	if i == checkModel {
		missModels(x.near, e, x.p.bid.GetTier())
	}
	x.failed(i, 1, e, x.tierPrice(e))
}

// unsure counts the offers v takes whose probes are unsure, v's verdict
// being verdict: an offer of a pair from its probe and the verdicts of
// its two buckets where they tell, any other by every check. Its groups
// fail or pass the checks to region as their buckets say: the offer
// fails at the later of two fails, and where a group passes it has that
// group's GPUs (the more, where both pass) for the checks after.
func (x *explainer) unsure(v *bucketView, verdict int) {
	same := v.currency == x.p.bid.GetCurrency()
	for j := range v.unsure {
		u := &v.unsure[j]
		r := &u.probe
		other := bucketMixed
		if u.paired {
			if o, known := x.verdicts[u.second.other]; known {
				other = o
			}
		}
		if verdict == bucketMixed || other == bucketMixed {
			x.entry(r.e)
			continue
		}
		i := max(verdict, other) // a fail's index beats bucketPasses (-1)
		if verdict == bucketPasses || other == bucketPasses {
			var supply uint32
			if verdict == bucketPasses {
				supply = uint32(r.gpus)
			}
			if other == bucketPasses {
				supply = max(supply, uint32(u.second.count))
			}
			if i = x.p.fails(r, same, supply); i == probeAsk || i == probePass {
				x.entry(r.e)
				continue
			}
		}
		if i == checkModel {
			missModels(x.near, r.e, x.p.bid.GetTier())
		}
		x.failed(i, 1, r.e, x.tierPrice(r.e))
	}
}

// bucket counts the offers of v with sure probes under check i, the
// cheapest of them for the bid's tier as their nearest.
func (x *explainer) bucket(v *bucketView, i int) {
	if v.nSure == 0 {
		return
	}
	near, price := v.firstSure, uint64(math.MaxUint64)
	if t := x.p.bid.GetTier(); t >= pb.Tier_TIER_GOLD && t <= pb.Tier_TIER_BRONZE && v.cheapest[t] != nil {
		near, price = v.cheapest[t], uint64(v.cheapest[t].prices[t-1])
	}
	x.failed(i, v.nSure, near.e, price)
	if i == checkModel {
		mm := x.near[v.model]
		if mm == nil {
			mm = &ModelMiss{Model: v.model}
			x.near[v.model] = mm
		}
		mm.Offers += v.nSure
		if price != math.MaxUint64 && (mm.PriceMicros == 0 || price < mm.PriceMicros) {
			mm.PriceMicros = price
		}
	}
}

// The checks that Explain answers per bucket, by index.
var (
	checkModel   = checkIndex("model")
	checkVRAM    = checkIndex("vram")
	checkCompute = checkIndex("compute")
	checkRegion  = checkIndex("region")
)

func checkIndex(name string) int {
	i := slices.IndexFunc(feasibilityChecks[:], func(c feasCheck) bool { return c.name == name })
	if i < 0 {
		panic("market: no check " + name)
	}
	return i
}

// missModels counts e under each model it has, with its price for t.
func missModels(near map[string]*ModelMiss, e *offerEntry, t pb.Tier) {
	price := e.prices[t]
	for i, g := range e.gpus {
		if slices.ContainsFunc(e.gpus[:i], func(h gpuFacts) bool { return h.model == g.model }) {
			continue
		}
		mm := near[g.model]
		if mm == nil {
			mm = &ModelMiss{Model: g.model, PriceMicros: price}
			near[g.model] = mm
		}
		mm.Offers++
		if price != 0 && (mm.PriceMicros == 0 || price < mm.PriceMicros) {
			mm.PriceMicros = price
		}
	}
}

func sortReasonCounts(rs []ReasonCount) {
	slices.SortFunc(rs, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Kind, b.Kind))
	})
}

// String reads like "37 offers: vram below 40 GiB; 12: region not allowed;
// 3 feasible".
func (e Explanation) String() string {
	if e.Offers == 0 {
		return "no offers"
	}
	var b strings.Builder
	for i, r := range e.Reasons {
		if i == 0 {
			fmt.Fprintf(&b, "%d offers: %s", r.Count, r.Kind)
		} else {
			fmt.Fprintf(&b, "; %d: %s", r.Count, r.Kind)
		}
	}
	if b.Len() > 0 {
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "%d feasible", e.Feasible)
	for i, mm := range e.Nearest {
		if i == 0 {
			b.WriteString("; nearest models: ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d offers", mm.Model, mm.Offers)
		if mm.PriceMicros > 0 {
			fmt.Fprintf(&b, ", from %s/GPU-h", FormatPrice(mm.PriceMicros))
		}
		b.WriteString(")")
	}
	return b.String()
}

// Snapshot is an immutable view of a Book, safe for concurrent readers:
// what the matcher and listings read. Slices it returns are the caller's
// own.
type Snapshot struct {
	offers  [bookShards]map[bookKey]*offerEntry
	bids    [bookShards]map[bookKey]*bidEntry
	nOffers int
	nBids   int
	views   []*bucketView            // every bucket, by model then country
	byModel map[string][]*bucketView // by country within a model
	// countries maps each country of an offer to the string the book holds.
	countries map[string]string

	sortOnce sync.Once
	sorted   []*offerEntry // live offers by key, built on first use
}

// Len returns the number of live offers.
func (s *Snapshot) Len() int { return s.nOffers }

// NumBids returns the number of live bids.
func (s *Snapshot) NumBids() int { return s.nBids }

// Offer returns the live offer of issuer with id.
func (s *Snapshot) Offer(issuer peer.ID, id string) (*pb.Offer, bool) {
	k := bookKey{issuer, id}
	e := s.offers[shardOf(k)][k]
	if e == nil || e.offer == nil {
		return nil, false
	}
	return e.offer, true
}

// Bid returns the live bid of issuer with id.
func (s *Snapshot) Bid(issuer peer.ID, id string) (*pb.Bid, bool) {
	k := bookKey{issuer, id}
	e := s.bids[shardOf(k)][k]
	if e == nil || e.bid == nil {
		return nil, false
	}
	return e.bid, true
}

// Offers returns every live offer, ordered by issuer, then id.
func (s *Snapshot) Offers() []*pb.Offer {
	es := s.entries()
	out := make([]*pb.Offer, len(es))
	for i, e := range es {
		out[i] = e.offer
	}
	return out
}

// entries returns the live offer entries in key order, sorted once.
func (s *Snapshot) entries() []*offerEntry {
	s.sortOnce.Do(func() {
		s.sorted = make([]*offerEntry, 0, s.nOffers)
		for _, m := range s.offers {
			for _, e := range m {
				if e.offer != nil {
					s.sorted = append(s.sorted, e)
				}
			}
		}
		slices.SortFunc(s.sorted, func(x, y *offerEntry) int { return compareKeys(x.key, y.key) })
	})
	return s.sorted
}

// Bids returns every live bid, ordered by issuer, then id.
func (s *Snapshot) Bids() []*pb.Bid {
	out := make([]*pb.Bid, 0, s.nBids)
	for _, m := range s.bids {
		for _, e := range m {
			if e.bid != nil {
				out = append(out, e.bid)
			}
		}
	}
	slices.SortFunc(out, func(x, y *pb.Bid) int { return compareKeys(keyOf(x.GetHeader()), keyOf(y.GetHeader())) })
	return out
}

// offerCursor walks one bucket's list for the bid's tier, cut at the
// bid's maximum price, over the items that may fit the bid; price is
// its head's, kept beside it so the heap compares without chasing the
// list.
type offerCursor struct {
	price uint64
	list  []viewItem
	i     int
}

// skip moves the cursor to its first item from i on that may fit p and
// costs at most limit; it says false when none is left.
func (c *offerCursor) skip(p *bidPlan, limit uint64) bool {
	for ; c.i < len(c.list); c.i++ {
		it := &c.list[c.i]
		if it.price > limit || it.fits(p) {
			c.price = it.price
			return true
		}
	}
	return false
}

// cursorHeap merges the cursors into one walk in rising order of tier
// price, so the walk can stop at a price. Offers of one price come in
// no set order: the walk takes every one of them before it can stop, and
// the ranking orders them.
type cursorHeap struct {
	p   *bidPlan
	cs  []offerCursor
	buf *[]offerCursor // cs's array, from cursorBufs
}

// cursorBufs keeps the cursor arrays of walks done, for walks to come: a
// walk opens a cursor on each bucket that may fit.
var cursorBufs = sync.Pool{New: func() any { return new([]offerCursor) }}

// release returns the heap's array to cursorBufs, cleared (it points
// into a snapshot).
func (h *cursorHeap) release() {
	if h.buf == nil {
		return
	}
	all := h.cs[:cap(h.cs)]
	clear(all)
	*h.buf = all[:0]
	cursorBufs.Put(h.buf)
	h.buf, h.cs = nil, nil
}

// cursors opens a cursor on every bucket of an allowed model and country
// whose bounds may fit the bid.
func (m *Matcher) cursors(s *Snapshot, p *bidPlan) cursorHeap {
	t := p.bid.GetTier()
	h := cursorHeap{p: p}
	if t < pb.Tier_TIER_GOLD || t > pb.Tier_TIER_BRONZE {
		return h
	}
	maxPrice := p.bid.GetMaxPriceMicros()
	open := func(v *bucketView) {
		if !countryAllowed(p, v.country) || !v.hi.fits(p) {
			return
		}
		list := v.tiers[t]
		n, _ := slices.BinarySearchFunc(list, maxPrice+1, func(it viewItem, price uint64) int { return cmp.Compare(it.price, price) })
		if c := (offerCursor{list: list[:n]}); c.skip(p, maxPrice) {
			h.cs = append(h.cs, c)
		}
	}
	h.buf = cursorBufs.Get().(*[]offerCursor)
	h.cs = (*h.buf)[:0]
	if models := p.models; len(models) > 0 {
		for i, model := range models {
			if !slices.Contains(models[:i], model) {
				for _, v := range s.byModel[model] {
					open(v)
				}
			}
		}
	} else {
		for _, v := range s.views {
			open(v)
		}
	}
	for i := len(h.cs)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return h
}

func countryAllowed(p *bidPlan, country string) bool {
	return (len(p.allowed) == 0 || slices.Contains(p.allowed, country)) && !slices.Contains(p.denied, country)
}

func (h *cursorHeap) top() *viewItem { return &h.cs[0].list[h.cs[0].i] }

// advance moves past the top entry, and past the entries after it in
// its list that cannot fit, up to limit.
func (h *cursorHeap) advance(limit uint64) {
	c := &h.cs[0]
	c.i++
	if !c.skip(h.p, limit) {
		last := len(h.cs) - 1
		h.cs[0] = h.cs[last]
		h.cs = h.cs[:last]
	}
	h.down(0)
}

func (h *cursorHeap) down(i int) {
	cs := h.cs
	for n := len(cs); ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		if r := l + 1; r < n && cs[r].price < cs[l].price {
			l = r
		}
		if cs[l].price >= cs[i].price {
			return
		}
		cs[i], cs[l] = cs[l], cs[i]
		i = l
	}
}

// OfferFilter selects and orders offers for a listing; a zero field
// selects all.
type OfferFilter struct {
	GPUModel       string
	MinVRAMBytes   uint64 // of a GPU of GPUModel, or of any GPU
	Country        string
	MaxPriceMicros uint64 // for Tier, or for the offer's cheapest tier
	Tier           pb.Tier
	SortBy         string // "price" (the default), "vram" (most first) or "expiry" (soonest first)
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
	seen := make(map[*offerEntry]bool)
	views, modelList := s.views, []string(nil)
	if f.GPUModel != "" {
		modelList, views = gpus.Default().Expand([]string{f.GPUModel}), nil
		for _, m := range modelList {
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
				vram := bestGroup(&e.offerFacts, gpuMasksOf(&e.offerFacts, nil, modelList).model, gpuVRAM)
				if vram < f.MinVRAMBytes || seen[e] {
					continue
				}
				if len(e.buckets) > 1 {
					seen[e] = true // listed under another model too
				}
				hits = append(hits, hit{e, price, vram})
			}
		}
	}
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
		out[i] = h.e.offer
	}
	return out
}

// cheapestTier is the tier at which e asks least (the better tier on a tie).
func cheapestTier(e *offerEntry) pb.Tier {
	best := pb.Tier_TIER_UNSPECIFIED
	for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
		if e.prices[t] != 0 && (best == pb.Tier_TIER_UNSPECIFIED || e.prices[t] < e.prices[best]) {
			best = t
		}
	}
	return best
}
