package market

import (
	"cmp"
	"math"
	"math/bits"
	"slices"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
)

// The book's index: per GPU model and country, a bucket of its offers,
// published as immutable views (per tier, the offers by price; bounds
// of what they have; Explain's probes) that snapshots share.

// bucketKey names an index bucket: offers of one GPU model in one country.
type bucketKey struct{ model, country string }

// offerBucket collects the offers of one bucketKey. Between snapshots new
// entries wait in added and dead ones in removed; Snapshot merges them
// into a fresh bucketView.
type offerBucket struct {
	key      bucketKey
	currency string        // of the offer it began with
	view     *bucketView   // as last published, shared with snapshots
	added    []*offerEntry // entered since view was published
	removed  []*offerEntry // died since view was published
	live     int
	dirty    bool
}

// bucketView is a published, immutable bucket: per tier, the entries that
// offer it, sorted by that tier's price, then issuer and id; bounds of
// what its entries have, for skipping it whole; and its entries that
// other buckets list too (offers of several models).
type bucketView struct {
	model, country string
	tiers          [4][]viewItem
	// hi and lo hold, per field of the items of every tier, the most and
	// the least (flags: any and every); lo of the items of one GPU group
	// of whole GiB only, the offers a probe stands for.
	hi, lo viewItem
	n      int // distinct live entries
	// nSure of them have sure probes; unsure are the others that Explain
	// takes here (an offer of several models, in its first's bucket), in
	// key order, with their pairs.
	nSure  int
	unsure []unsureProbe
	// cheapest is, per tier, the sure probe of the least price, the first
	// in key order; firstSure the first sure one (nil: none).
	cheapest  [4]*probe
	firstSure *probe
	// chunks hold its entries' probes, as Explain reads them, in key
	// order; currency is the one the bucket began with, which they mark.
	chunks   []*probeChunk
	currency string
}

// viewItem is an entry in a bucket view with what the matcher's walk reads
// without touching the entry: the tier's price, and upper bounds of what
// the offer has: GPUs of the bucket's model in all its groups, their most
// VRAM (GiB, rounded up) and compute capability, their form factors and
// NVLink (flags); the host's cores, RAM and disk (GiB, rounded up), and
// its GPUs, whose shares split it unless it is sold whole (flags), and
// its bandwidth up and down (10 Mbit/s, rounded up). Counts saturate:
// the most a field holds stands for at least that. 40 bytes.
type viewItem struct {
	price                  uint64
	e                      *offerEntry
	gpus, vramGiB          uint16
	hostGPUs               uint16
	cc, flags              uint8
	hostCores, hostDiskGiB uint16
	hostRAMGiB             uint32
	hostUp, hostDown       uint16 // 10 Mbit/s
}

// tenMbps is bits per second in 10 Mbit/s, rounded up, saturated.
func tenMbps(bits uint64) uint16 { return uint16(min(bits/1e7+min(bits%1e7, 1), math.MaxUint16)) }

// Item flags: bit i for gpus.FormFactors[i]; several groups of the
// bucket's model; a VRAM not a whole GiB; a host sold whole; NVLink.
const (
	flagGroups    = 1 << 4
	flagInexact   = 1 << 5
	flagHostWhole = 1 << 6
	flagNVLink    = 1 << 7
)

func formFactorFlag(ff string) uint8 {
	if i := slices.Index(gpus.FormFactors, ff); i >= 0 && i < 4 {
		return 1 << i
	}
	return 0
}

func sat16(v uint32) uint16 { return uint16(min(v, math.MaxUint16)) }

func itemOf(e *offerEntry, model string, t pb.Tier) viewItem {
	it := viewItem{price: e.prices[t], e: e, hostCores: sat16(e.host.cores), hostDiskGiB: sat16(ceilGiB(e.host.disk)), hostRAMGiB: ceilGiB(e.host.ram), hostGPUs: sat16(e.host.gpus),
		hostUp: tenMbps(e.host.up), hostDown: tenMbps(e.host.down)}
	var n, vram, groups uint32
	for _, g := range e.gpus {
		if g.model == model {
			if groups++; groups > 1 {
				it.flags |= flagGroups
			}
			if g.vram%(1<<30) != 0 {
				it.flags |= flagInexact
			}
			n += g.count
			vram = max(vram, ceilGiB(g.vram))
			it.cc = max(it.cc, uint8(min(g.cc, math.MaxUint8)))
			it.flags |= formFactorFlag(g.formFactor)
			if g.nvlink {
				it.flags |= flagNVLink
			}
		}
	}
	if e.host.whole || it.hostGPUs == math.MaxUint16 {
		it.flags |= flagHostWhole
	}
	it.gpus, it.vramGiB = sat16(n), sat16(vram)
	return it
}

// fits says whether the offer may have what the bid's plan needs (false
// means it surely has not). The host's share is of the most GPUs a lease
// could take.
func (it *viewItem) fits(p *bidPlan) bool {
	if !(uint32(it.gpus) >= p.need || it.gpus == math.MaxUint16) ||
		!(uint64(it.vramGiB)<<30 >= p.minVRAM || it.vramGiB == math.MaxUint16) ||
		!(uint32(it.cc) >= p.minCC || it.cc == math.MaxUint8) || it.flags&p.flags != p.flags {
		return false
	}
	cores, ram, disk := uint64(it.hostCores), uint64(it.hostRAMGiB)<<30, uint64(it.hostDiskGiB)<<30
	up, down := uint64(it.hostUp)*1e7, uint64(it.hostDown)*1e7
	if n := uint64(min(uint32(it.gpus), p.want)); it.flags&flagHostWhole == 0 && n < uint64(it.hostGPUs) {
		g := uint64(it.hostGPUs)
		ram, disk, cores = shareOf(ram, n, g), shareOf(disk, n, g), cores*n/g
		up, down = shareOf(up, n, g), shareOf(down, n, g)
	}
	return (cores >= uint64(p.minCores) || it.hostCores == math.MaxUint16) && ram >= p.minRAM &&
		(disk >= p.minDisk || it.hostDiskGiB == math.MaxUint16) &&
		(up >= p.minUp || it.hostUp == math.MaxUint16) && (down >= p.minDown || it.hostDown == math.MaxUint16)
}

// shareOf is n of g parts of v, rounded down (n < g: the quotient is
// below v).
func shareOf(v, n, g uint64) uint64 {
	hi, lo := bits.Mul64(v, n)
	q, _ := bits.Div64(hi, lo, g)
	return q
}

// widen makes hi and lo bound it too.
func widen(hi, lo *viewItem, it *viewItem) {
	hi.gpus, hi.vramGiB, hi.cc, hi.flags = max(hi.gpus, it.gpus), max(hi.vramGiB, it.vramGiB), max(hi.cc, it.cc), hi.flags|it.flags
	hi.hostGPUs = min(hi.hostGPUs, it.hostGPUs) // fewer GPUs to share the host with: a larger share
	hi.hostCores, hi.hostDiskGiB, hi.hostRAMGiB = max(hi.hostCores, it.hostCores), max(hi.hostDiskGiB, it.hostDiskGiB), max(hi.hostRAMGiB, it.hostRAMGiB)
	hi.hostUp, hi.hostDown = max(hi.hostUp, it.hostUp), max(hi.hostDown, it.hostDown)
	if it.flags&(flagGroups|flagInexact) != 0 {
		return // its offer's probe is unsure: lo bounds the others
	}
	lo.gpus, lo.vramGiB, lo.cc, lo.flags = min(lo.gpus, it.gpus), min(lo.vramGiB, it.vramGiB), min(lo.cc, it.cc), lo.flags&it.flags
	lo.hostGPUs = max(lo.hostGPUs, it.hostGPUs)
	lo.hostCores, lo.hostDiskGiB, lo.hostRAMGiB = min(lo.hostCores, it.hostCores), min(lo.hostDiskGiB, it.hostDiskGiB), min(lo.hostRAMGiB, it.hostRAMGiB)
	lo.hostUp, lo.hostDown = min(lo.hostUp, it.hostUp), min(lo.hostDown, it.hostDown)
}

func ceilGiB(b uint64) uint32 { return uint32(min((b+(1<<30)-1)>>30, 1<<32-1)) }

// index adds e to the bucket of each of its GPU models. It points e's
// model and country strings at the bucket's, which stay hot in cache.
func (b *Book) index(e *offerEntry) {
	for i := range e.gpus {
		g := &e.gpus[i]
		if j := slices.IndexFunc(e.gpus[:i], func(p gpuFacts) bool { return p.model == g.model }); j >= 0 {
			g.model = e.gpus[j].model
			continue // a model already indexed for this offer
		}
		k := bucketKey{g.model, e.country}
		bk := b.buckets[k]
		if bk == nil {
			bk = &offerBucket{key: k, currency: e.currency}
			b.buckets[k] = bk
			i, _ := slices.BinarySearchFunc(b.order, k, func(x *offerBucket, k bucketKey) int {
				return cmp.Or(cmp.Compare(x.key.model, k.model), cmp.Compare(x.key.country, k.country))
			})
			b.order = slices.Insert(b.order, i, bk)
		}
		bk.added = append(bk.added, e)
		bk.live++
		bk.dirty = true
		e.buckets = append(e.buckets, bk)
		g.model, e.country = bk.key.model, bk.key.country
	}
}

// unindex marks e dead in its buckets. Dead entries stay listed until the
// next snapshot, or until they outnumber the live ones: then the bucket
// rebuilds at once, so memory stays bounded in a book nobody snapshots.
func (b *Book) unindex(e *offerEntry) {
	e.dead = true
	for _, bk := range e.buckets {
		bk.live--
		bk.dirty = true
		if bk.removed = append(bk.removed, e); len(bk.removed) > bk.live+32 {
			bk.rebuild()
		}
	}
}

// publish brings every changed bucket's view up to date, drops empty
// buckets, and returns all views in bucket order.
func (b *Book) publish() []*bucketView {
	views := make([]*bucketView, 0, len(b.order))
	kept := b.order[:0]
	for _, bk := range b.order {
		if bk.live == 0 {
			delete(b.buckets, bk.key)
			continue
		}
		if bk.dirty {
			bk.rebuild()
		}
		kept = append(kept, bk)
		views = append(views, bk.view)
	}
	clear(b.order[len(kept):])
	b.order = kept
	return views
}

// rebuild merges the bucket's added entries into a new view without the
// removed ones. Tiers that did not change keep their lists; the others
// are copied in runs between the positions of the removed and added
// entries, found by binary search: O(bucket size) copying, and
// O((added + removed)·log) comparisons.
func (bk *offerBucket) rebuild() {
	v := &bucketView{model: bk.key.model, country: bk.key.country}
	for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
		var old []viewItem
		if bk.view != nil {
			old = bk.view.tiers[t]
		}
		var drop []int
		for _, e := range bk.removed {
			// A key has one entry per seq: match the entry, not just its key.
			if i, ok := slices.BinarySearchFunc(old, viewItem{price: e.prices[t], e: e}, compareItems); ok && old[i].e == e {
				drop = append(drop, i)
			}
		}
		var add []viewItem
		for _, e := range bk.added {
			if !e.dead && e.offers(t) {
				add = append(add, itemOf(e, bk.key.model, t))
			}
		}
		if len(drop)+len(add) == 0 {
			v.tiers[t] = old
			continue
		}
		slices.Sort(drop)
		slices.SortFunc(add, compareItems)
		v.tiers[t] = mergeSorted(old, drop, add, compareItems)
	}
	var old []*probeChunk
	var oldUnsure []unsureProbe
	if bk.view != nil {
		old, oldUnsure = bk.view.chunks, bk.view.unsure
	}
	var dropUnsure []int
	for _, e := range bk.removed {
		if i, ok := slices.BinarySearchFunc(oldUnsure, unsureProbe{probe: probe{e: e}}, compareUnsure); ok && oldUnsure[i].e == e {
			dropUnsure = append(dropUnsure, i)
		}
	}
	var add []probe
	var addUnsure []unsureProbe
	for _, e := range bk.added {
		if !e.dead {
			r, second, ok := probeOf(e, bk.key, bk.currency)
			add = append(add, r)
			if r.flags&(probeUnsure|probeAway) == probeUnsure { // taken here
				addUnsure = append(addUnsure, unsureProbe{r, second, ok})
			}
		}
	}
	slices.Sort(dropUnsure)
	slices.SortFunc(add, compareProbes)
	slices.SortFunc(addUnsure, compareUnsure)
	v.chunks, v.currency = rechunk(old, bk.removed, add), bk.currency
	v.unsure = mergeSorted(oldUnsure, dropUnsure, addUnsure, compareUnsure)
	v.hi.hostGPUs = math.MaxUint16
	v.lo = viewItem{gpus: math.MaxUint16, vramGiB: math.MaxUint16, cc: math.MaxUint8, flags: math.MaxUint8, hostCores: math.MaxUint16, hostDiskGiB: math.MaxUint16, hostRAMGiB: math.MaxUint32,
		hostUp: math.MaxUint16, hostDown: math.MaxUint16}
	for _, list := range v.tiers {
		for i := range list {
			widen(&v.hi, &v.lo, &list[i])
		}
	}
	for _, c := range v.chunks {
		v.nSure += c.nSure
		if v.firstSure == nil {
			v.firstSure = c.firstSure
		}
		for t := 1; t <= 3; t++ {
			if r := c.cheapest[t]; r != nil && (v.cheapest[t] == nil || r.prices[t-1] < v.cheapest[t].prices[t-1]) {
				v.cheapest[t] = r
			}
		}
	}
	v.n = bk.live
	bk.view, bk.added, bk.removed, bk.dirty = v, nil, nil, false
}

// mergeSorted returns old without the items at the sorted positions
// drop, with the sorted items add merged in, in the order of compare.
func mergeSorted[T any](old []T, drop []int, add []T, compare func(T, T) int) []T {
	if len(drop)+len(add) == 0 {
		return old
	}
	out := make([]T, 0, len(old)-len(drop)+len(add))
	run := func(seg []T) { // seg and the adds that fall in it
		for len(add) > 0 {
			j, _ := slices.BinarySearchFunc(seg, add[0], compare)
			if j == len(seg) {
				break
			}
			out = append(append(out, seg[:j]...), add[0])
			seg, add = seg[j:], add[1:]
		}
		out = append(out, seg...)
	}
	prev := 0
	for _, d := range drop {
		run(old[prev:d])
		prev = d + 1
	}
	run(old[prev:])
	return append(out, add...)
}

// compareItems orders a view by price, then by key. (Not cmp.Or: it would
// compare the keys even where the prices differ.)
func compareItems(x, y viewItem) int {
	if c := cmp.Compare(x.price, y.price); c != 0 {
		return c
	}
	return compareKeys(x.e.key, y.e.key)
}

func compareProbes(x, y probe) int { return compareKeys(x.e.key, y.e.key) }

func compareUnsure(x, y unsureProbe) int { return compareKeys(x.e.key, y.e.key) }

func compareKeys(a, b bookKey) int {
	if c := cmp.Compare(a.issuer, b.issuer); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}
