package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
)

// Explain: why the offers of a book do or do not fit a bid, each counted
// under the first check it fails, exactly, without touching most of
// them.

// Explanation says, for every offer of a snapshot, whether it fits a bid
// and if not why: each offer counts under the first check it fails.
type Explanation struct {
	Offers   int
	Feasible int
	Reasons  []ReasonCount // most common first
	// Blocker is, when nothing fits, the one constraint whose moving
	// alone would let the most offers fit, with what they have; nil where
	// none does alone.
	Blocker *Blocker
	// Nearest are, when offers failed the model check, the models they
	// have instead, nearest what the bid asks first (see nearestModels),
	// at most three.
	Nearest []ModelMiss
}

// ModelMiss is a model the book has where the bid wants another: how
// many offers have it and, when nothing fits, how many of those fit the
// bid but for the model (Offers then counts those) and the least price
// per GPU-hour of a lease of GPUs of them (0 where none fits, or where
// something does: the price is then not worked out).
type ModelMiss struct {
	Model       string
	Offers      int
	PriceMicros uint64
	GPUs        uint32
	vram        uint64 // the most a GPU of them has, where known
	distance    float64
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
			r := m.reason(e, nil, p, i)
			rc.Check, rc.Kind, rc.Example = r.Check, r.Kind, r.Detail
			ex.Reasons = append(ex.Reasons, rc)
		}
	}
	sortReasonCounts(ex.Reasons)
	ex.further(p, x.near, func(check string) *relaxed { return m.relax(s, bid, check, now) })
	return ex
}

// further adds, where nothing fits, the blocker and the nearest models
// by what fits each constraint moved (relax), else the nearest models
// of near, the models offers had that failed the model check.
func (ex *Explanation) further(p *bidPlan, near map[string]*ModelMiss, relax func(check string) *relaxed) {
	missed := slices.ContainsFunc(ex.Reasons, func(r ReasonCount) bool { return r.Check == "model" })
	if ex.Feasible > 0 || len(ex.Reasons) == 0 {
		ex.Nearest = priceless(nearestModels(near, p))
		return
	}
	var byModel *relaxed
	ex.Blocker, byModel = blocker(ex.Reasons, relax)
	if !missed {
		return
	}
	if ex.Blocker == nil || ex.Blocker.Check != "model" {
		byModel = relax("model")
	}
	if byModel.fit > 0 {
		ex.Nearest = nearestModels(byModel.models, p)
	} else {
		ex.Nearest = priceless(nearestModels(near, p))
	}
}

// priceless drops the prices of ms: what a lease of them would cost
// was not worked out.
func priceless(ms []ModelMiss) []ModelMiss {
	for i := range ms {
		ms[i].PriceMicros, ms[i].GPUs = 0, 0
	}
	return ms
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
	if lo.flags&p.flags != p.flags || p.memoryBound(v.model) {
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
	_, i := x.m.evaluate(x.ctx, e, nil, x.p, false)
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

// String leads, when nothing fits, with the constraint that blocks and
// what the offers it keeps out have, then the nearest models, then the
// offers each check failed first:
//
//	silver price above 0.12 blocks every offer: without it 37 fit, the
//	cheapest asks 0.1333/GPU-h; nearest models: RTX 6000 Ada (2 fit,
//	from 0.90/GPU-h for 1 GPU); by the first check each fails: 37
//	offers: silver price above 0.12; 12: region not allowed; 0 feasible
func (e Explanation) String() string {
	if e.Offers == 0 {
		return "no offers"
	}
	var b strings.Builder
	if bl := e.Blocker; bl != nil && e.Feasible == 0 {
		fmt.Fprintf(&b, "%s blocks every offer: without it %d fit, %s; ", bl.Kind, bl.Fit, bl.Figure)
	}
	for i, mm := range e.Nearest {
		if i == 0 {
			b.WriteString("nearest models: ")
		} else {
			b.WriteString(", ")
		}
		if mm.PriceMicros > 0 {
			fmt.Fprintf(&b, "%s (%d fit, from %s/GPU-h for %s)", mm.Model, mm.Offers, FormatPrice(mm.PriceMicros), plural(int(mm.GPUs), "GPU"))
		} else {
			fmt.Fprintf(&b, "%s (%d offers)", mm.Model, mm.Offers)
		}
		if i == len(e.Nearest)-1 {
			b.WriteString("; ")
		}
	}
	if len(e.Reasons) > 0 {
		b.WriteString("by the first check each fails: ")
	}
	for i, r := range e.Reasons {
		if i == 0 {
			fmt.Fprintf(&b, "%d offers: %s; ", r.Count, r.Kind)
		} else {
			fmt.Fprintf(&b, "%d: %s; ", r.Count, r.Kind)
		}
	}
	fmt.Fprintf(&b, "%d feasible", e.Feasible)
	return b.String()
}
