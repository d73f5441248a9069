package market

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/idlegrid/idlegrid/market/pb"
)

// A probe is an offer as Explain's pass over a bucket reads it: what the
// checks between the bucket's (model to region) and the price's read of
// an offer with one GPU group, in one cache line, kept in key order
// beside the bucket's others. Explain streams through a bucket's probes
// and touches an offer's entry only where its probe cannot tell (see
// probeUnsure) or where the offer passes the price: the checks after it
// ask outside sources and the calendar. 64 bytes.
type probe struct {
	e                *offerEntry
	expiresMs        int64
	prices           [3]uint32 // micros per GPU-hour, gold to bronze; 0 where not sold
	minDur, maxDur   uint32    // seconds
	cores            uint32
	ramGiB, diskGiB  uint32
	upMbps, downMbps uint32
	gpus, hostGPUs   uint16 // the group's, and the host's
	classes          uint16 // the offer's workload classes, as classIDs bits
	flags            uint8
	step             uint8
}

// Probe flags.
const (
	probeUnsure    = 1 << iota // the probe cannot stand for the offer: run the checks on it
	probeWhole                 // sold whole (offerFacts.gpusWhole)
	probeHostWhole             // every lease gets all of the host
	probeClasses               // the offer names workload classes
	probeImages                // the offer has image rules
	probeCurrency              // in the bucket's currency
	probeMulti                 // an offer of several models (in several buckets)
	probeAway                  // one Explain takes in another bucket: that of its first model
)

// probeOf is e's probe in the bucket of key whose currency is currency.
// A probe whose figures do not fit (a second GPU group, sizes not whole
// GiB or Mbit/s, numbers too large) is marked unsure. Where the second
// group alone makes it unsure, the group is a pair, and ok.
func probeOf(e *offerEntry, key bucketKey, currency string) (r probe, second pair, ok bool) {
	model := key.model
	f := &e.offerFacts
	r = probe{e: e, expiresMs: f.expiresMs, step: uint8(min(f.gpuStep, math.MaxUint8))}
	whole := func(g gpuFacts) bool { return g.vram%(1<<30) == 0 }
	if len(f.gpus) == 2 && len(e.buckets) == 2 && f.gpus[0].model == model && f.gpus[1].model != model && whole(f.gpus[0]) && whole(f.gpus[1]) &&
		f.gpus[1].count <= math.MaxUint16 {
		second, ok = pair{other: e.buckets[1].key, count: uint16(f.gpus[1].count)}, true
	}
	unsure := f.withdrawn
	gpusUnsure := len(f.gpus) != 1 || len(e.buckets) != 1 || f.gpus[0].model != model || !whole(f.gpus[0])
	fit32 := func(v uint64, unit uint64) uint32 {
		if v%unit != 0 || v/unit > math.MaxUint32 {
			unsure = true
		}
		return uint32(v / unit)
	}
	fit16 := func(v uint32) uint16 {
		if v > math.MaxUint16 {
			unsure = true
		}
		return uint16(v)
	}
	for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
		r.prices[t-1] = fit32(f.prices[t], 1)
		if f.offers(t) && f.prices[t] == 0 { // sold, free: the probe would read it as not sold
			unsure = true
		}
	}
	r.minDur, r.maxDur = fit32(f.minDur, 1), fit32(f.maxDur, 1)
	r.cores = f.host.cores
	r.ramGiB, r.diskGiB = fit32(f.host.ram, 1<<30), fit32(f.host.disk, 1<<30)
	r.upMbps, r.downMbps = fit32(f.host.up, 1e6), fit32(f.host.down, 1e6)
	if len(f.gpus) > 0 {
		r.gpus = fit16(f.gpus[0].count)
	}
	r.hostGPUs = fit16(f.host.gpus)
	if r.classes = f.classBits; !f.classKnown {
		unsure = true
	}
	if f.gpuStep > math.MaxUint8 {
		unsure = true
	}
	ok = ok && !unsure
	for _, set := range []struct {
		on   bool
		flag uint8
	}{{unsure || gpusUnsure, probeUnsure}, {f.gpusWhole, probeWhole}, {f.host.whole, probeHostWhole}, {f.classes > 0, probeClasses},
		{f.images, probeImages}, {f.currency == currency, probeCurrency},
		{len(e.buckets) > 1, probeMulti}, {len(e.buckets) > 1 && e.buckets[0].key != key, probeAway}} {
		if set.on {
			r.flags |= set.flag
		}
	}
	return r, second, ok
}

// A pair is the second GPU group of an offer of two models, of whole
// GiB, kept with the probe of its first (taken in the first's bucket):
// the bucket of its model, and its count. With the verdicts of both
// buckets Explain reads the offer from the probe alone.
type pair struct {
	other bucketKey
	count uint16
}

// unsureProbe is an unsure probe a bucket takes, with its pair where the
// offer has one (paired).
type unsureProbe struct {
	probe
	second pair
	paired bool
}

// classTable numbers workload classes for offers' facts and probes: the
// common ones from the start, the first others seen after them, 16 in
// all, never renumbered (facts and probes keep their bits). An offer
// naming a class beyond them is checked by name, and its probe is
// unsure: right, only slower.
type classTable struct {
	mu  sync.Mutex
	ids atomic.Pointer[map[string]uint16] // copied on write
}

var classIDs = newClassTable("training", "inference", "batch", "interactive", "fine-tuning", "rendering", "evaluation", "development")

func newClassTable(common ...string) *classTable {
	ids := map[string]uint16{}
	for i, c := range common {
		ids[c] = 1 << i
	}
	t := new(classTable)
	t.ids.Store(&ids)
	return t
}

// bit is class's bit, or 0 where it has none.
func (t *classTable) bit(class string) uint16 { return (*t.ids.Load())[class] }

// set returns the bits of classes, numbering new ones while there is
// room, and whether every class has a bit.
func (t *classTable) set(classes []string) (uint16, bool) {
	var bits uint16
	for _, c := range classes {
		b := t.bit(c)
		if b == 0 {
			if b = t.add(c); b == 0 {
				return 0, false
			}
		}
		bits |= b
	}
	return bits, true
}

func (t *classTable) add(class string) uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.ids.Load()
	if b, ok := old[class]; ok || len(old) == 16 {
		return b
	}
	ids := make(map[string]uint16, len(old)+1)
	for c, b := range old {
		ids[c] = b
	}
	ids[class] = 1 << len(old)
	t.ids.Store(&ids)
	return ids[class]
}

// The checks a probe answers, by index; probePass is its answer for an
// offer that passes them all, probeAsk for one it cannot tell about.
var (
	checkGPUs       = checkIndex("gpus")
	checkBundle     = checkIndex("bundle")
	checkHost       = checkIndex("host")
	checkLive       = checkIndex("live")
	checkCurrency   = checkIndex("currency")
	checkTier       = checkIndex("tier")
	checkPreemption = checkIndex("preemption")
	checkDuration   = checkIndex("duration")
	checkWorkload   = checkIndex("workload")
	checkPrice      = checkIndex("price")
)

const (
	probePass = -1
	probeAsk  = -2
)

// fails runs the checks from gpus to price on r, for an offer whose
// bucket passes the checks before them (model to region) for every one
// of its offers, and whose currency is the bid's where sameCurrency: the
// index of the first that fails, probePass, or probeAsk. supply is the
// most GPUs of one model that pass the checks before: r's unless the
// offer has a pair.
func (p *bidPlan) fails(r *probe, sameCurrency bool, supply uint32) int {
	if supply < p.need {
		return checkGPUs
	}
	n := take(supply, p.want, uint32(r.step), r.flags&probeWhole != 0, uint32(r.hostGPUs))
	if n < p.need {
		return checkBundle
	}
	if p.hostMin {
		host := hostFacts{cores: r.cores, ram: uint64(r.ramGiB) << 30, disk: uint64(r.diskGiB) << 30, up: uint64(r.upMbps) * 1e6, down: uint64(r.downMbps) * 1e6,
			whole: r.flags&probeHostWhole != 0, gpus: uint32(r.hostGPUs)}
		if hostShort(host.share(n), p.bid.GetHostMin()) != "" {
			return checkHost
		}
	}
	if r.expiresMs <= p.nowMs {
		return checkLive
	}
	if r.flags&probeCurrency == 0 {
		return probeAsk
	}
	if !sameCurrency {
		return checkCurrency
	}
	t := p.bid.GetTier()
	if t < pb.Tier_TIER_GOLD || t > pb.Tier_TIER_BRONZE || r.prices[t-1] == 0 {
		return checkTier
	}
	if t == pb.Tier_TIER_BRONZE && !p.bid.GetPreemptionOk() {
		return checkPreemption
	}
	if d := p.bid.GetDurationSeconds(); d < uint64(r.minDur) || d > uint64(r.maxDur) {
		return checkDuration
	}
	if r.flags&probeClasses != 0 && r.classes&p.classes == 0 {
		return checkWorkload
	}
	if r.flags&probeImages != 0 && p.bid.GetImage() != "" {
		return probeAsk
	}
	if uint64(r.prices[t-1]) > p.bid.GetMaxPriceMicros() {
		return checkPrice
	}
	return probePass
}

// probeChunk is a run of a bucket's probes in key order, shared by the
// views it did not change in, with what Explain reads of it whole: a
// rebuild copies the chunks an offer enters or leaves, not the bucket.
type probeChunk struct {
	probes []probe
	nSure  int
	// cheapest is, per tier, the sure probe of the least price, the
	// first in key order; firstSure the first sure one (nil: none).
	cheapest  [4]*probe
	firstSure *probe
}

// chunkProbes is how many probes a chunk is cut to; one grows to twice
// that before it is cut.
const chunkProbes = 256

func newChunk(probes []probe) *probeChunk {
	c := &probeChunk{probes: probes}
	for i := range probes {
		r := &probes[i]
		if r.flags&probeUnsure != 0 {
			continue
		}
		c.nSure++
		if c.firstSure == nil {
			c.firstSure = r
		}
		for t := 1; t <= 3; t++ {
			if old := c.cheapest[t]; r.prices[t-1] != 0 && (old == nil || r.prices[t-1] < old.prices[t-1]) {
				c.cheapest[t] = r
			}
		}
	}
	return c
}

// rechunk returns old's chunks without the probes of removed and with
// add (in key order) merged in: the chunks they fall in copied, cut
// where they grew past twice chunkProbes, dropped where emptied; the
// others shared. With no chunks before (a bucket never published, or
// emptied since), removed holds nothing of old's and add is the bucket.
func rechunk(old []*probeChunk, removed []*offerEntry, add []probe) []*probeChunk {
	if len(removed)+len(add) == 0 {
		return old
	}
	if len(old) == 0 {
		return cutChunks(nil, add)
	}
	// The chunk a key falls in: the first whose last key is not below
	// it, else the last.
	at := func(k bookKey) int {
		i, _ := slices.BinarySearchFunc(old, k, func(c *probeChunk, k bookKey) int { return compareKeys(c.probes[len(c.probes)-1].e.key, k) })
		return min(i, len(old)-1)
	}
	drops := map[int][]int{}
	adds := map[int][]probe{}
	for _, e := range removed {
		i := at(e.key)
		// A key has one entry per seq: match the entry, not just its key.
		if j, ok := slices.BinarySearchFunc(old[i].probes, probe{e: e}, compareProbes); ok && old[i].probes[j].e == e {
			drops[i] = append(drops[i], j)
		}
	}
	for _, r := range add {
		i := at(r.e.key)
		adds[i] = append(adds[i], r)
	}
	out := make([]*probeChunk, 0, len(old)+len(adds))
	for i, c := range old {
		d, a := drops[i], adds[i]
		if len(d)+len(a) == 0 {
			out = append(out, c)
			continue
		}
		slices.Sort(d)
		out = cutChunks(out, mergeSorted(c.probes, d, a, compareProbes))
	}
	return out
}

// cutChunks appends probes to out as chunks of chunkProbes, the last
// holding up to twice that, and none for no probes.
func cutChunks(out []*probeChunk, probes []probe) []*probeChunk {
	for len(probes) > 2*chunkProbes {
		out = append(out, newChunk(probes[:chunkProbes:chunkProbes]))
		probes = probes[chunkProbes:]
	}
	if len(probes) > 0 {
		out = append(out, newChunk(probes))
	}
	return out
}
