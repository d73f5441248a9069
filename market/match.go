package market

import (
	"cmp"
	"math"
	"slices"
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
	query    Query
}

// NewMatcher returns a matcher with cfg (a field that fails Validate gets
// its default) and the given sources; nil sources are neutral: every
// provider fully reliable, every RTT unknown.
func NewMatcher(cfg MatchConfig, rel Reliability, rtt RTTs) *Matcher {
	rel, rtt = sourcesOr(rel, rtt)
	_, blind := rtt.(UnknownRTTs)
	return &Matcher{cfg: cfg.sanitized(), rel: rel, rtt: rtt, blindRTT: blind}
}

// sourcesOr is rel and rtt, or for nil the neutral ones: every provider
// fully reliable, every RTT unknown.
func sourcesOr(rel Reliability, rtt RTTs) (Reliability, RTTs) {
	if rel == nil {
		rel = NeutralReliability{}
	}
	if rtt == nil {
		rtt = UnknownRTTs{}
	}
	return rel, rtt
}

// WithExcluder returns a copy of m that skips the providers x excludes.
func (m *Matcher) WithExcluder(x Excluder) *Matcher {
	c := *m
	c.excl = x
	return &c
}

// WithQuery returns a copy of m that holds offers to q too (the "where"
// check), after the bid's own terms.
func (m *Matcher) WithQuery(q Query) *Matcher {
	c := *m
	c.query = q
	return &c
}

// Config returns the configuration in effect.
func (m *Matcher) Config() MatchConfig { return m.cfg }

// Result is the outcome of one match.
type Result struct {
	// Candidates are the best K, best first.
	Candidates []Candidate
	// Considered counts the offers the indexes handed to the checks;
	// the rest were cut by model, country, tier or price unseen, or,
	// once k candidates were found, by ranking below the k-th.
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
	var best map[peer.ID]int      // with k ≤ 0: each provider's candidate, unsorted till the end
	if k <= 0 {
		best = map[peer.ID]int{}
	}
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
		if k > 0 && len(res.Candidates) == k && m.outranked(it.price, e, p, res.Candidates[k-1].EffectivePriceMicros) {
			continue // ranks below the k-th whatever the checks say: not considered
		}
		res.Considered++
		c, failed := m.evaluate(ctx, e, nil, p, false)
		if failed >= 0 {
			res.fails[failed]++
			continue
		}
		res.Feasible++
		if k <= 0 { // every candidate: sorted once, at the end
			j, listed := best[c.Issuer]
			switch {
			case p.split || !listed:
				best[c.Issuer] = len(res.Candidates)
				res.Candidates = append(res.Candidates, c)
			case compareCandidates(&c, &res.Candidates[j]) < 0:
				res.Candidates[j] = c
			}
			continue
		}
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
	if k <= 0 {
		slices.SortStableFunc(res.Candidates, func(a, b Candidate) int { return compareCandidates(&a, &b) })
	}
	return res
}

// outranked says whether the offer of e, were it feasible, would rank
// after an effective price of kth: what evaluate would give it, from the
// two sources alone (a map lookup each; the RTT first, which moves the
// price the most, so an offer it rules out costs one), so the walk past
// the k-th candidate runs no check on an offer that cannot displace it.
// It reckons as evaluate does, from the price the walk has: a feasible
// offer's candidate has at least the effective price compared (a
// window's floor may raise its price, never lower it).
func (m *Matcher) outranked(price uint64, e *offerEntry, p *bidPlan, kth float64) bool {
	rtt, from := rttOf(m.rtt, e.key.issuer, e.coord)
	if from == RTTUnknown {
		rtt = p.unknownRTT
	}
	if m.cfg.effectivePrice(price, 1, rtt) > kth { // reliability only raises it
		return true
	}
	return m.cfg.effectivePrice(price, clamp01(m.rel.Reliability(e.key.issuer)), rtt) > kth
}

// Feasible runs every check on one offer for bid at now, without the
// indexes. It returns the candidate the offer makes, or the first reason
// it does not fit.
func (m *Matcher) Feasible(o *pb.Offer, bid *pb.Bid, now time.Time) (Candidate, *Reason) {
	p := m.plan(bid, now)
	e := &offerEntry{offerFacts: factsOf(o), key: keyOf(o.GetHeader())}
	c, failed := m.evaluate(new(evalCtx), e, o, p, true)
	if failed < 0 {
		return c, nil
	}
	return Candidate{}, m.reason(e, o, p, failed)
}

// evaluate runs the pipeline on the offer of e (o, or nil to decode it
// only if a check must) with c, which it resets (one context serves a
// whole match, so the hot path does not allocate): the index of the
// first failing check, or -1 and the scored candidate, whose offer is
// decoded by Candidate.decode where it was not.
func (m *Matcher) evaluate(c *evalCtx, e *offerEntry, o *pb.Offer, p *bidPlan, explain bool) (Candidate, int) {
	*c = evalCtx{m: m, p: p, e: e, o: o, f: &e.offerFacts, issuer: e.key.issuer, explain: explain, wins: c.wins}
	for i := range feasibilityChecks {
		if !feasibilityChecks[i].fits(c) {
			return Candidate{}, i
		}
	}
	staging := stagingOf(p.bid.GetDatasets(), e.datasets, e.host.down)
	cand := Candidate{
		offer: c.o, entry: e, Issuer: e.key.issuer, GPUs: c.gpus, Model: c.model, PriceMicros: c.price,
		EffectivePriceMicros: m.cfg.effectivePrice(c.price, c.rel, c.rankRTT()) + staging.cost(c.price, p.bid.GetDurationSeconds()),
		Staging:              staging,
		Start:                time.UnixMilli(c.start).UTC(),
		Scores:               m.score(c),
		TotalMicros:          LeaseTotal(c.price, c.gpus, p.bid.GetDurationSeconds()),
		Reliability:          c.rel, RTT: c.rtt, RTTKnown: c.rttKnown, RTTSource: c.rttFrom,
	}
	return cand, -1
}

// reason reruns check i on the offer of e (o, or nil) to say why it
// failed.
func (m *Matcher) reason(e *offerEntry, o *pb.Offer, p *bidPlan, i int) *Reason {
	c := evalCtx{m: m, p: p, e: e, o: o, f: &e.offerFacts, issuer: e.key.issuer, explain: true}
	for j := 0; j < i; j++ { // later checks read what earlier ones recorded
		feasibilityChecks[j].fits(&c)
	}
	feasibilityChecks[i].fits(&c)
	return &Reason{Check: feasibilityChecks[i].name, Kind: feasibilityChecks[i].kind(p), Detail: c.detail}
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
	// kinds lists, by gpus.Key, the models of byModel the catalog lacks:
	// one GPU the book holds under several spellings.
	kinds map[string][]string

	sortOnce sync.Once
	sorted   []*offerEntry // live offers by key, built on first use
}

// Len returns the number of live offers.
func (s *Snapshot) Len() int { return s.nOffers }

// NumBids returns the number of live bids.
func (s *Snapshot) NumBids() int { return s.nBids }

// Offer returns the live offer of issuer with id.
func (s *Snapshot) Offer(issuer peer.ID, id string) (*pb.Offer, bool) {
	if e := s.liveEntry(issuer, id); e != nil {
		return e.decode(), true
	}
	return nil, false
}

// Seq returns the sequence number of the live offer of issuer with id,
// without decoding it.
func (s *Snapshot) Seq(issuer peer.ID, id string) (uint64, bool) {
	if e := s.liveEntry(issuer, id); e != nil {
		return e.seq, true
	}
	return 0, false
}

// liveEntry is the entry of the live offer of issuer with id, or nil.
func (s *Snapshot) liveEntry(issuer peer.ID, id string) *offerEntry {
	k := bookKey{issuer, id}
	if e := s.offers[shardOf(k)][k]; e != nil && e.live() {
		return e
	}
	return nil
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
		out[i] = e.decode()
	}
	return out
}

// Issuers returns the issuers of the live offers, each once, in order.
func (s *Snapshot) Issuers() []peer.ID {
	var out []peer.ID
	for _, e := range s.entries() {
		if len(out) == 0 || out[len(out)-1] != e.key.issuer {
			out = append(out, e.key.issuer)
		}
	}
	return out
}

// entries returns the live offer entries in key order, sorted once.
func (s *Snapshot) entries() []*offerEntry {
	s.sortOnce.Do(func() {
		s.sorted = make([]*offerEntry, 0, s.nOffers)
		for _, m := range s.offers {
			for _, e := range m {
				if e.live() {
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

// GPUNamed is how the book's offers name a GPU the catalog lacks, in a
// spelling Key equates with name ("foo-9" for offers of "Foo 9"); false
// where no offer does (a nil snapshot holds none).
func (s *Snapshot) GPUNamed(name string) (string, bool) {
	if s == nil {
		return "", false
	}
	if ms := s.kinds[gpus.Default().KindOf(name)]; len(ms) > 0 {
		return ms[0], true
	}
	return "", false
}

// kindsOf adds to as, for each model the catalog lacks, the other
// spellings of it the book holds ("Foo-9" for "Foo 9"), with its memory.
func (s *Snapshot) kindsOf(as []gpus.Accept) []gpus.Accept {
	out := as
	for _, a := range as {
		if a.Kind == "" {
			continue
		}
		for _, m := range s.kinds[a.Kind] {
			if b := (gpus.Accept{Model: m, MemoryBytes: a.MemoryBytes, Kind: a.Kind}); !slices.Contains(out, b) {
				if len(out) == len(as) {
					out = slices.Clone(as)
				}
				out = append(out, b)
			}
		}
	}
	return out
}
