package market

import (
	"fmt"
	"maps"
	"math/bits"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
// The book keeps each offer as its facts (what the checks and indexes
// read) and its encoding, not as a decoded message, which would be most
// of its memory: readers of a whole offer (Snapshot.Offer, FindOffers,
// Candidate.Offer) get a copy decoded for them, and the checks that read
// lists the facts leave out decode it on the few offers that reach them.
//
// Snapshots share the book's data; the trade-off is where the copying
// goes. A write is cheap (a few microseconds: the offer's encoding, a map
// update and an append to its bucket), except that the first write to a key shard after a
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

// offerEntry is one offer in the book: its facts, and the offer itself
// as bytes (a third of it decoded), decoded for whoever reads more; raw
// is nil for a tombstone. An entry is immutable once stored, except
// dead, which only the book reads.
type offerEntry struct {
	stamp
	offerFacts
	key     bookKey
	raw     []byte
	buckets []*offerBucket
	dead    bool        // replaced, withdrawn or expired; guarded by Book.mu
	gpuBuf  [1]gpuFacts // most offers have one group
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
	var raw []byte
	if !o.GetWithdrawn() {
		// The index lists an offer under its GPUs' models, per tier.
		if f = factsOf(o); len(f.gpus) == 0 || f.tiers == 0 {
			return fmt.Errorf("book: offer: %w", invalid("gpus", "%d groups in %d tiers; want at least one of each", len(f.gpus), bits.OnesCount8(f.tiers)))
		}
		var err error
		if raw, err = proto.Marshal(o); err != nil {
			return fmt.Errorf("book: offer: %w", err)
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
	e := &offerEntry{stamp: st, key: k, raw: raw}
	if !o.GetWithdrawn() {
		e.offerFacts = f
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
	if e.live() {
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
	if old != nil && old.live() {
		b.unindex(old)
		b.nOffers--
	}
	if e.live() {
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
	expired, forgotten := sweep(&b.offers, nowMs, func(e *offerEntry) bool { return e.live() })
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

// live says whether e holds an offer (not a tombstone).
func (e *offerEntry) live() bool { return e.raw != nil }

// Field numbers of the offer's windows, which windows reads.
var (
	offerFields  = (*pb.Offer)(nil).ProtoReflect().Descriptor().Fields()
	windowsField = offerFields.ByName("windows").Number()
	weeklyField  = offerFields.ByName("weekly").Number()
)

// windows appends the windows of e's offer to oneOff and weekly, read
// from its bytes alone: what fitsWindow needs, without decoding the
// offer or allocating past the slices' growth.
func (e *offerEntry) windows(oneOff []oneOffWindow, weekly []weeklyWindow) ([]oneOffWindow, []weeklyWindow) {
	for f := (fields{b: e.raw}); f.next(); {
		if f.typ != protowire.BytesType || f.num != windowsField && f.num != weeklyField {
			continue
		}
		v, _ := protowire.ConsumeBytes(f.v)
		start, end, floor := windowFields(v)
		if f.num == windowsField {
			oneOff = append(oneOff, oneOffWindow{int64(start), int64(end), floor})
		} else {
			weekly = append(weekly, weeklyWindow{uint32(start), uint32(end), floor})
		}
	}
	return oneOff, weekly
}

// windowFields reads an Interval's or a WeeklyWindow's fields 1 to 3,
// varints both (start, end, floor), as proto does: the last of each wins.
func windowFields(b []byte) (start, end, floor uint64) {
	for f := (fields{b: b}); f.next(); {
		if f.typ != protowire.VarintType {
			continue
		}
		v, _ := protowire.ConsumeVarint(f.v)
		switch f.num {
		case 1:
			start = v
		case 2:
			end = v
		case 3:
			floor = v
		}
	}
	return start, end, floor
}

// fields walks the fields of an encoded message: next moves to the
// next, setting its number, type and encoded value, and says false at
// the end (or at bytes that do not parse, which the book never holds).
type fields struct {
	b   []byte
	num protowire.Number
	typ protowire.Type
	v   []byte
}

func (f *fields) next() bool {
	num, typ, n := protowire.ConsumeTag(f.b)
	if n < 0 {
		return false
	}
	m := protowire.ConsumeFieldValue(num, typ, f.b[n:])
	if m < 0 {
		return false
	}
	f.num, f.typ, f.v, f.b = num, typ, f.b[n:n+m], f.b[n+m:]
	return true
}

// decode is e's offer, decoded afresh: the caller's own.
func (e *offerEntry) decode() *pb.Offer {
	o := new(pb.Offer)
	if err := proto.Unmarshal(e.raw, o); err != nil {
		panic(fmt.Sprintf("book: the offer %s/%s the book encoded does not decode: %v", e.key.issuer, e.key.id, err))
	}
	return o
}
func (e *bidEntry) stampOf() *stamp { return &e.stamp }

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
		kinds:     make(map[string][]string),
	}
	s.views = b.publish()
	cat := gpus.Default()
	for _, v := range s.views {
		if len(s.byModel[v.model]) == 0 {
			if k := cat.KindOf(v.model); k != "" {
				s.kinds[k] = append(s.kinds[k], v.model)
			}
		}
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
