package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// What Explain says a renter can act on, when nothing fits: the one
// constraint that, moved alone, would let offers fit, with what the
// nearest of them have; and the models nearest the one asked, by what
// they are (chip, memory, family), each from its price for the GPUs and
// host asked.

// Blocker is the constraint that keeps a bid from every offer, where
// moving it alone would let Fit offers fit.
type Blocker struct {
	Check, Kind string
	Fit         int
	// Figure is what the offers that would fit have on the constraint:
	// "the cheapest asks 0.1333/GPU-h", "the most memory is 96 GB".
	Figure string
	// Near are the first of them, at most maxNearest, in the walk's
	// order: by the tier's price, before a window's floor raises it.
	Near []Candidate
}

// relaxations move one constraint of a bid out of the way, by check;
// checks missing here (currency, liveness, tier, duration) are not a
// constraint the renter moves alone.
var relaxations = map[string]func(b *pb.Bid){
	"model":       func(b *pb.Bid) { b.Gpu.Models, b.Gpu.FormFactor, b.Gpu.Nvlink = nil, "", false },
	"vram":        func(b *pb.Bid) { b.Gpu.MinVramBytes = 0 },
	"compute":     func(b *pb.Bid) { b.Gpu.MinComputeCapability = 0 },
	"region":      func(b *pb.Bid) { b.RegionsAllowed, b.RegionsDenied = nil, nil },
	"gpus":        func(b *pb.Bid) { b.Gpu.MinPerProvider = 1 },
	"bundle":      func(b *pb.Bid) { b.Gpu.MinPerProvider, b.Gpu.Count = 1, MaxBidGPUs },
	"host":        func(b *pb.Bid) { b.HostMin = nil },
	"preemption":  func(b *pb.Bid) { b.PreemptionOk = true },
	"workload":    func(b *pb.Bid) { b.WorkloadClass = "" },
	"image":       func(b *pb.Bid) { b.Image = "" },
	"price":       func(b *pb.Bid) { b.MaxPriceMicros = math.MaxUint64 / 4 },
	"reliability": func(b *pb.Bid) { b.MinReliabilityPermille = 0 },
	"rtt":         func(b *pb.Bid) { b.MaxRttMs = 0 },
	"window":      func(b *pb.Bid) { b.LatestStartUnixMs = 0 },
	"where":       func(*pb.Bid) {}, // the matcher's query, dropped by relaxedPlan
}

// MaxBidGPUs is the most GPUs a bid may ask for.
const MaxBidGPUs = 1024

// relaxed is what fits a bid with one constraint moved: how many
// offers, the cheapest few, per model the cheapest and how many, and the
// extremes the figures quote.
type relaxed struct {
	fit       int
	near      []Candidate // by price, at most maxNearest
	models    map[string]*ModelMiss
	maxVRAM   uint64
	maxCC     uint32
	maxGPUs   uint32
	maxRel    float64
	minRTT    time.Duration
	rttKnown  bool
	earliest  time.Time
	minPrice  uint64
	countries []string // distinct, sorted
}

// relaxedPlan is the plan of bid with check's constraint moved, for a
// matcher that ranks by price alone.
func (m *Matcher) relaxedPlan(bid *pb.Bid, check string, now time.Time) (*Matcher, *bidPlan) {
	b := proto.Clone(bid).(*pb.Bid)
	if b.Gpu == nil {
		b.Gpu = &pb.GPURequirement{}
	}
	relaxations[check](b)
	byPrice := *m
	byPrice.cfg.Alpha, byPrice.cfg.Beta = 0, 0
	if check == "where" {
		byPrice.query = Query{}
	}
	return &byPrice, byPrice.plan(b, now)
}

// relax walks every offer of s that fits bid, its check moved out of
// the way, and gathers what they have.
func (m *Matcher) relax(s *Snapshot, bid *pb.Bid, check string, now time.Time) *relaxed {
	byPrice, p := m.relaxedPlan(bid, check, now)
	p.intern(s)
	r := newRelaxed()
	h := byPrice.cursors(s, p)
	defer h.release()
	ctx := new(evalCtx)
	seen := map[*offerEntry]bool{}
	for len(h.cs) > 0 {
		it := h.top()
		h.advance(math.MaxUint64)
		e := it.e
		if !it.fits(p) || seen[e] {
			continue
		}
		seen[e] = true
		c, failed := byPrice.evaluate(ctx, e, nil, p, false)
		if failed >= 0 {
			continue
		}
		r.add(c, e, ctx)
	}
	return r
}

func newRelaxed() *relaxed {
	return &relaxed{models: map[string]*ModelMiss{}, minPrice: math.MaxUint64}
}

// add counts c, the candidate e makes, ctx its checks' record.
func (r *relaxed) add(c Candidate, e *offerEntry, ctx *evalCtx) {
	r.fit++
	if len(r.near) < maxNearest {
		r.near = append(r.near, c) // the index's walk runs in rising price
	}
	r.minPrice = min(r.minPrice, c.PriceMicros)
	mask := ctx.masks.compute
	r.maxVRAM = max(r.maxVRAM, bestGroup(&e.offerFacts, mask, gpuVRAM))
	r.maxCC = max(r.maxCC, uint32(bestGroup(&e.offerFacts, mask, func(g *gpuFacts) uint64 { return uint64(g.cc) })))
	r.maxGPUs, r.maxRel = max(r.maxGPUs, c.GPUs), max(r.maxRel, c.Reliability)
	if c.RTTKnown && (!r.rttKnown || c.RTT < r.minRTT) {
		r.minRTT, r.rttKnown = c.RTT, true
	}
	if r.earliest.IsZero() || c.Start.Before(r.earliest) {
		r.earliest = c.Start
	}
	if i, found := slices.BinarySearch(r.countries, e.country); !found {
		r.countries = slices.Insert(r.countries, i, e.country)
	}
	// The offer counts once, under the model a lease takes.
	mm := r.models[c.Model]
	if mm == nil {
		mm = &ModelMiss{Model: c.Model, PriceMicros: c.PriceMicros, GPUs: c.GPUs}
		r.models[c.Model] = mm
	}
	if c.PriceMicros < mm.PriceMicros || c.PriceMicros == mm.PriceMicros && c.GPUs > mm.GPUs {
		mm.PriceMicros, mm.GPUs = c.PriceMicros, c.GPUs
	}
	mm.Offers++
	for i := range min(len(e.gpus), 64) {
		if g := &e.gpus[i]; mask&(1<<i) != 0 && g.model == c.Model {
			mm.vram = max(mm.vram, g.vram)
		}
	}
}

// figure says what the offers that fit with check moved have on it.
func (r *relaxed) figure(check string) string {
	switch check {
	case "price":
		return fmt.Sprintf("the cheapest asks %s/GPU-h", FormatPrice(r.minPrice))
	case "vram":
		return "the most memory a GPU of them has is " + gpus.ShowMemory(r.maxVRAM)
	case "compute":
		return "the highest compute capability is " + computeCap(r.maxCC)
	case "gpus", "bundle":
		return fmt.Sprintf("one provider leases at most %d of them", r.maxGPUs)
	case "region":
		if len(r.countries) > 5 {
			return fmt.Sprintf("they are in %s and %d more countries", strings.Join(r.countries[:5], ", "), len(r.countries)-5)
		}
		return "they are in " + strings.Join(r.countries, ", ")
	case "reliability":
		return fmt.Sprintf("the most reliable is %.3f", r.maxRel)
	case "rtt":
		if r.rttKnown {
			return "the nearest is " + r.minRTT.Round(time.Millisecond).String() + " away"
		}
		return "none has a known RTT"
	case "window":
		return "the earliest starts " + r.earliest.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("the cheapest asks %s/GPU-h", FormatPrice(r.minPrice))
}

// blocker finds, for a bid nothing fits, the check among those offers
// failed whose moving alone lets the most offers fit (the earlier in
// the pipeline on a tie): of the model's offers first, the model itself
// only where moving no other check lets one of them fit; nil where no
// one check does.
func blocker(reasons []ReasonCount, relax func(check string) *relaxed) (*Blocker, *relaxed) {
	b, r := blockerOf(reasons, relax, func(check string) bool { return check != "model" })
	if b == nil {
		b, r = blockerOf(reasons, relax, func(check string) bool { return check == "model" })
	}
	return b, r
}

func blockerOf(reasons []ReasonCount, relax func(check string) *relaxed, consider func(check string) bool) (*Blocker, *relaxed) {
	var best *Blocker
	var bestR *relaxed
	bestAt := len(feasibilityChecks)
	for _, rc := range reasons {
		if relaxations[rc.Check] == nil || !consider(rc.Check) {
			continue
		}
		at := checkIndex(rc.Check)
		r := relax(rc.Check)
		if r.fit == 0 || best != nil && (r.fit < best.Fit || r.fit == best.Fit && at > bestAt) {
			continue
		}
		best, bestR, bestAt = &Blocker{Check: rc.Check, Kind: rc.Kind, Fit: r.fit, Figure: r.figure(rc.Check), Near: r.near}, r, at
	}
	return best, bestR
}

// nearestModels ranks the models of near, none of those asked, by how
// near each is to what p asks: the same family, the same architecture
// (chip), memory within a factor, the same segment; then by price.
func nearestModels(near map[string]*ModelMiss, p *bidPlan) []ModelMiss {
	cat := gpus.Default()
	var out []ModelMiss
	for _, mm := range near {
		if len(p.accepts) > 0 && gpus.Accepts(p.accepts, mm.Model, cat.KindOf(mm.Model), mm.vram) {
			continue // what was asked, not a model instead (one of another memory is)
		}
		x := *mm
		x.distance = math.Inf(1)
		for _, a := range p.accepts {
			x.distance = min(x.distance, modelDistance(cat, a, mm.Model, mm.vram))
		}
		if len(p.accepts) == 0 {
			x.distance = 0
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b ModelMiss) int {
		return cmp.Or(cmp.Compare(a.distance, b.distance), cmp.Compare(a.PriceMicros, b.PriceMicros), cmp.Compare(a.Model, b.Model))
	})
	return out[:min(len(out), maxNearest)]
}

// modelDistance is how far a GPU of model with vram is from what a
// asks: a point each for another family and another architecture, the
// memory's factor in powers of two, a quarter for another segment; a
// GPU the catalog lacks, or an entry it lacks, differs in family and
// architecture.
func modelDistance(cat *gpus.Catalog, a gpus.Accept, model string, vram uint64) float64 {
	wants := []*gpus.Model{nil}
	if ms, ok := cat.Family(a.Model); ok { // the nearest of the family
		wants = ms
	} else if m, ok := cat.Lookup(a.Model); ok {
		wants[0] = m
	}
	d := math.Inf(1)
	for _, want := range wants {
		d = min(d, distanceTo(cat, want, a.MemoryBytes, model, vram))
	}
	return d
}

// distanceTo is modelDistance from one model wanted (nil: one the
// catalog lacks), of memory wantMem where the entry holds one.
func distanceTo(cat *gpus.Catalog, want *gpus.Model, wantMem uint64, model string, vram uint64) float64 {
	have, haveOK := cat.Lookup(model)
	if wantMem == 0 && want != nil {
		wantMem = want.MemoryBytes()
	}
	d := 2.0
	if haveOK && want != nil {
		d = 0
		if have.Family != want.Family {
			d++
		}
		if have.Architecture != want.Architecture {
			d++
		}
		if have.Segment != want.Segment {
			d += 0.25
		}
	}
	if haveOK {
		vram = have.MemoryBytes()
	}
	if wantMem > 0 && vram > 0 {
		d += math.Abs(math.Log2(float64(vram) / float64(wantMem)))
	}
	return d
}

// plural reads like "1 GPU", "8 GPUs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
