package market

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Book holds the live offers and bids a node knows, keyed by (issuer, id),
// and the indexes the matcher asks: offers by GPU model and country, each
// sorted by price per tier. It is safe for concurrent use; readers work on
// a Snapshot while writers continue.
//
// The book remembers the highest sequence number seen for every key, also
// after a withdrawal or expiry, so a replayed older message cannot bring an
// offer back. A remembered key is forgotten at max(expiry, creation +
// DefaultLimits().MaxHorizon): by then every message an honest issuer made
// with a lower seq has expired too and is refused as such. Memory is thus
// bounded by the keys seen within one horizon.
//
// Snapshots share the book's data; the trade-off is where the copying
// goes. A write is cheap (about a microsecond: a map update and an append
// to its bucket), except that the first write to a key shard after a
// snapshot copies that shard (1/256 of the keys). The price-sorted indexes
// are brought up to date by Snapshot, only for the (model, country)
// buckets that changed since the last one, by merging the changes into
// the previous sorted lists: O(1) when nothing changed, else O(size of the
// changed buckets + number of buckets). Matching then reads immutable,
// sorted arrays and never waits for a writer.
type Book struct {
	// mu guards everything below; it is held for no I/O, only map and
	// slice updates, so readers and the one writer (a node's market
	// owner) never wait on anything slow.
	mu      sync.Mutex
	offers  shardSet[*offerEntry]
	bids    shardSet[*bidEntry]
	buckets map[bucketKey]*offerBucket
	order   []*offerBucket // every bucket, sorted by model then country
	nOffers int
	nBids   int
	horizon int64     // ms a remembered seq outlives its message's creation
	last    *Snapshot // nil once the book changed after it

	offerRoom, bidRoom room                            // bounds; see SetLimits
	evicted            func(issuer peer.ID, id string) // told of evicted offers
}

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{
		buckets: make(map[bucketKey]*offerBucket),
		horizon: DefaultLimits().MaxHorizon.Milliseconds(),
	}
}

// bookKey names a message: its issuer and the issuer's ID for it.
type bookKey struct {
	issuer peer.ID
	id     string
}

func keyOf(h *pb.Header) bookKey { return bookKey{peer.ID(h.GetIssuer()), h.GetId()} }

// stamp is what the book remembers of a key, live or withdrawn.
type stamp struct {
	seq     uint64
	expires int64 // Unix ms
	forget  int64 // Unix ms after which a tombstone is dropped
	rank    int8  // the issuer's rank when the key arrived
}

// offerEntry is one offer in the book; offer is nil for a tombstone. An
// entry is immutable once stored, except dead, which only the book reads.
type offerEntry struct {
	stamp
	offerFacts
	key     bookKey
	offer   *pb.Offer
	buckets []*offerBucket
	dead    bool // replaced, withdrawn or expired; guarded by Book.mu
	gpuBuf  [2]gpuFacts
}

// bidEntry is one bid in the book; bid is nil for a tombstone.
type bidEntry struct {
	stamp
	bid *pb.Bid
}

// admit applies the book's rules to a message with header h arriving at
// now for a key of s: it returns the entry s holds (zero if none) and the
// stamp to remember, or why the message is refused.
func admit[V bookEntry](s *shardSet[V], kind string, h *pb.Header, now time.Time, horizon int64) (old V, st stamp, err error) {
	if h == nil {
		return old, st, fmt.Errorf("book: %s: %w", kind, invalid("header", "missing"))
	}
	k := keyOf(h)
	var zero V
	if old = s.get(k); old != zero && h.GetSeq() <= old.stampOf().seq {
		err = fmt.Errorf("%w: seq %d, have %d", ErrStale, h.GetSeq(), old.stampOf().seq)
	} else if h.GetExpiresUnixMs() <= now.UnixMilli() {
		err = fmt.Errorf("%w at %s", ErrExpired, ms(h.GetExpiresUnixMs()))
	}
	if err != nil {
		return old, st, fmt.Errorf("book: %s %s/%s: %w", kind, k.issuer, k.id, err)
	}
	forget := max(h.GetExpiresUnixMs(), h.GetCreatedUnixMs()+horizon)
	return old, stamp{seq: h.GetSeq(), expires: h.GetExpiresUnixMs(), forget: forget}, nil
}

// PutOffer inserts o, or replaces the offer with its (issuer, id) if o's
// seq is higher than any seen for that key; a lower or equal seq fails with
// ErrStale, an offer expired at now with ErrExpired. A withdrawn offer
// removes the live one and is remembered by its seq. The caller has
// verified the signature and validated the content.
func (b *Book) PutOffer(o *pb.Offer, now time.Time) error {
	var f offerFacts
	if !o.GetWithdrawn() {
		// The index lists an offer under its GPUs' models, per tier.
		if f = factsOf(o); len(f.gpus) == 0 || f.tiers == 0 {
			return fmt.Errorf("book: offer: %w", invalid("gpus", "%d groups in %d tiers; want at least one of each", len(f.gpus), bits.OnesCount8(f.tiers)))
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old, st, err := admit(&b.offers, "offer", o.GetHeader(), now, b.horizon)
	if err != nil {
		return err
	}
	k := keyOf(o.GetHeader())
	if old == nil {
		if st.rank, err = claim(&b.offerRoom, &b.offers, "offer", k, b.evictOffer); err != nil {
			return err
		}
	} else {
		st.rank = old.rank
	}
	e := &offerEntry{stamp: st, key: k}
	if !o.GetWithdrawn() {
		e.offer, e.offerFacts = o, f
		if len(f.gpus) <= len(e.gpuBuf) { // beside the other facts
			e.gpus = e.gpuBuf[:copy(e.gpuBuf[:], f.gpus)]
		}
	}
	b.replaceOffer(old, e)
	if old == nil {
		arrived(&b.offerRoom, &b.offers, k, st.rank)
	}
	return nil
}

// evictOffer drops the offer key k from the book, seq and all: it may
// come back, as a message the book has not seen.
func (b *Book) evictOffer(k bookKey) {
	e := b.offers.get(k)
	if e.offer != nil {
		b.unindex(e)
		b.nOffers--
	}
	b.offers.del(k)
	b.offerRoom.left(e.rank)
	b.offerRoom.evictions++
	b.last = nil
	if b.evicted != nil {
		b.evicted(k.issuer, k.id)
	}
}

// evictBid drops the bid key k from the book, seq and all.
func (b *Book) evictBid(k bookKey) {
	e := b.bids.get(k)
	if e.bid != nil {
		b.nBids--
	}
	b.bids.del(k)
	b.bidRoom.left(e.rank)
	b.bidRoom.evictions++
	b.last = nil
}

// Evicted says how many offer and bid keys the book evicted to make room.
func (b *Book) Evicted() (offers, bids uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.offerRoom.evictions, b.bidRoom.evictions
}

// replaceOffer stores e in place of old (either may be a tombstone).
func (b *Book) replaceOffer(old, e *offerEntry) {
	if old != nil && old.offer != nil {
		b.unindex(old)
		b.nOffers--
	}
	if e.offer != nil {
		b.index(e)
		b.nOffers++
	}
	b.offers.put(e.key, e)
	b.last = nil
}

// PutBid inserts or replaces x by the same rules as PutOffer. Bids have no
// withdrawn flag: a bid leaves the book by expiring.
func (b *Book) PutBid(x *pb.Bid, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, st, err := admit(&b.bids, "bid", x.GetHeader(), now, b.horizon)
	if err != nil {
		return err
	}
	k := keyOf(x.GetHeader())
	if old == nil {
		if st.rank, err = claim(&b.bidRoom, &b.bids, "bid", k, b.evictBid); err != nil {
			return err
		}
	} else {
		st.rank = old.rank
	}
	if old == nil || old.bid == nil {
		b.nBids++
	}
	b.bids.put(k, &bidEntry{stamp: st, bid: x})
	if old == nil {
		arrived(&b.bidRoom, &b.bids, k, st.rank)
	}
	b.last = nil
	return nil
}

// Expire drops the offers and bids that expired at now, keeping their
// seqs as tombstones, and forgets tombstones past their horizon. It
// returns how many live offers and bids it dropped. It walks the whole
// book: call it every few seconds, not per message.
func (b *Book) Expire(now time.Time) (offers, bids int) {
	nowMs := now.UnixMilli()
	b.mu.Lock()
	defer b.mu.Unlock()
	expired, forgotten := sweep(&b.offers, nowMs, func(e *offerEntry) bool { return e.offer != nil })
	for _, e := range expired {
		b.replaceOffer(e, &offerEntry{stamp: e.stamp, key: e.key})
	}
	for _, k := range forgotten {
		b.offerRoom.left(b.offers.get(k).rank)
		b.offers.del(k)
	}
	bidsExpired, bidsForgotten := sweep(&b.bids, nowMs, func(e *bidEntry) bool { return e.bid != nil })
	for _, e := range bidsExpired {
		b.bids.put(keyOf(e.bid.GetHeader()), &bidEntry{stamp: e.stamp})
		b.nBids--
	}
	for _, k := range bidsForgotten {
		b.bidRoom.left(b.bids.get(k).rank)
		b.bids.del(k)
	}
	compact(&b.offerRoom, &b.offers)
	compact(&b.bidRoom, &b.bids)
	if len(expired)+len(forgotten)+len(bidsExpired)+len(bidsForgotten) > 0 {
		b.last = nil
	}
	return len(expired), len(bidsExpired)
}

// sweep lists the live entries of s expired at nowMs and the keys of the
// tombstones to forget.
func sweep[V interface{ stampOf() *stamp }](s *shardSet[V], nowMs int64, live func(V) bool) (expired []V, forget []bookKey) {
	for _, sh := range s {
		if sh == nil {
			continue
		}
		for k, e := range sh.m {
			st := e.stampOf()
			switch {
			case live(e) && st.expires <= nowMs:
				expired = append(expired, e)
			case !live(e) && st.forget <= nowMs:
				forget = append(forget, k)
			}
		}
	}
	return expired, forget
}

func (e *offerEntry) stampOf() *stamp { return &e.stamp }
func (e *bidEntry) stampOf() *stamp   { return &e.stamp }

// Snapshot returns an immutable view of the book as it is now. Readers
// may use it from any goroutine while the book keeps changing.
func (b *Book) Snapshot() *Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last != nil {
		return b.last
	}
	s := &Snapshot{
		offers:    b.offers.freeze(),
		bids:      b.bids.freeze(),
		nOffers:   b.nOffers,
		nBids:     b.nBids,
		byModel:   make(map[string][]*bucketView),
		countries: make(map[string]string),
	}
	s.views = b.publish()
	for _, v := range s.views {
		s.byModel[v.model] = append(s.byModel[v.model], v)
		s.countries[v.country] = v.country
	}
	b.last = s
	return s
}

// A bookShards-way split of the key space lets a snapshot share every
// shard with the book, and a write after a snapshot copy only its shard.
const bookShards = 256

type shard[V any] struct {
	m      map[bookKey]V
	frozen bool // shared with a snapshot: copy before writing
}

type shardSet[V any] [bookShards]*shard[V]

// shardOf spreads keys over shards by FNV-1a of the id and the issuer's
// last bytes (the random part of a key-derived peer ID).
func shardOf(k bookKey) int {
	h := uint32(2166136261)
	for i := 0; i < len(k.id); i++ {
		h = (h ^ uint32(k.id[i])) * 16777619
	}
	for i := max(0, len(k.issuer)-8); i < len(k.issuer); i++ {
		h = (h ^ uint32(k.issuer[i])) * 16777619
	}
	return int(h % bookShards)
}

func (s *shardSet[V]) get(k bookKey) V {
	var zero V
	sh := s[shardOf(k)]
	if sh == nil {
		return zero
	}
	return sh.m[k]
}

// writable returns k's shard, copied first if a snapshot shares it.
func (s *shardSet[V]) writable(k bookKey) *shard[V] {
	i := shardOf(k)
	sh := s[i]
	switch {
	case sh == nil:
		sh = &shard[V]{m: make(map[bookKey]V)}
		s[i] = sh
	case sh.frozen:
		sh = &shard[V]{m: maps.Clone(sh.m)}
		s[i] = sh
	}
	return sh
}

func (s *shardSet[V]) put(k bookKey, v V) { s.writable(k).m[k] = v }
func (s *shardSet[V]) del(k bookKey)      { delete(s.writable(k).m, k) }

// freeze marks every shard shared and returns their maps for a snapshot.
func (s *shardSet[V]) freeze() [bookShards]map[bookKey]V {
	var out [bookShards]map[bookKey]V
	for i, sh := range s {
		if sh != nil {
			sh.frozen = true
			out[i] = sh.m
		}
	}
	return out
}

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
// its GPUs, whose shares split it unless it is sold whole (flags). Counts
// saturate: the most a field holds stands for at least that. 32 bytes.
type viewItem struct {
	price                  uint64
	e                      *offerEntry
	gpus, vramGiB          uint16
	hostGPUs               uint16
	cc, flags              uint8
	hostCores, hostDiskGiB uint16
	hostRAMGiB             uint32
}

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
	it := viewItem{price: e.prices[t], e: e, hostCores: sat16(e.host.cores), hostDiskGiB: sat16(ceilGiB(e.host.disk)), hostRAMGiB: ceilGiB(e.host.ram), hostGPUs: sat16(e.host.gpus)}
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
	if n := uint64(min(uint32(it.gpus), p.want)); it.flags&flagHostWhole == 0 && n < uint64(it.hostGPUs) {
		ram, disk, cores = shareOf(ram, n, it.hostGPUs), shareOf(disk, n, it.hostGPUs), cores*n/uint64(it.hostGPUs)
	}
	return (cores >= uint64(p.minCores) || it.hostCores == math.MaxUint16) && ram >= p.minRAM &&
		(disk >= p.minDisk || it.hostDiskGiB == math.MaxUint16)
}

// shareOf is n of g parts of v, rounded down.
func shareOf(v, n uint64, g uint16) uint64 {
	hi, lo := bits.Mul64(v, n)
	q, _ := bits.Div64(hi, lo, uint64(g))
	return q
}

// widen makes hi and lo bound it too.
func widen(hi, lo *viewItem, it *viewItem) {
	hi.gpus, hi.vramGiB, hi.cc, hi.flags = max(hi.gpus, it.gpus), max(hi.vramGiB, it.vramGiB), max(hi.cc, it.cc), hi.flags|it.flags
	hi.hostGPUs = min(hi.hostGPUs, it.hostGPUs) // fewer GPUs to share the host with: a larger share
	hi.hostCores, hi.hostDiskGiB, hi.hostRAMGiB = max(hi.hostCores, it.hostCores), max(hi.hostDiskGiB, it.hostDiskGiB), max(hi.hostRAMGiB, it.hostRAMGiB)
	if it.flags&(flagGroups|flagInexact) != 0 {
		return // its offer's probe is unsure: lo bounds the others
	}
	lo.gpus, lo.vramGiB, lo.cc, lo.flags = min(lo.gpus, it.gpus), min(lo.vramGiB, it.vramGiB), min(lo.cc, it.cc), lo.flags&it.flags
	lo.hostGPUs = max(lo.hostGPUs, it.hostGPUs)
	lo.hostCores, lo.hostDiskGiB, lo.hostRAMGiB = min(lo.hostCores, it.hostCores), min(lo.hostDiskGiB, it.hostDiskGiB), min(lo.hostRAMGiB, it.hostRAMGiB)
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
	v.lo = viewItem{gpus: math.MaxUint16, vramGiB: math.MaxUint16, cc: math.MaxUint8, flags: math.MaxUint8, hostCores: math.MaxUint16, hostDiskGiB: math.MaxUint16, hostRAMGiB: math.MaxUint32}
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
