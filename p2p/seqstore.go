package p2p

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/idlegrid/idlegrid/market"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SeqGuard remembers the highest sequence number accepted for each
// (topic kind, issuer, message ID), with the expiry of the message that
// carried it, so a message replayed with an old sequence number is
// ignored, also after a restart. A record is pruned once its message has
// expired: a replay of it is then refused as expired.
//
// The numbers live in memory, where validators check them; Flush writes
// what changed since the last flush to the datastore in one batch, so a
// burst of gossip costs one fsync rather than one per message. A node
// killed between flushes forgets the numbers of that interval; its book,
// rebuilt by sync, holds the latest offers all the same.
//
// It is safe for concurrent use (pubsub runs validators in parallel): its
// mutex guards the two maps and is held for no I/O.
//
// It also bounds how many message IDs of a kind one issuer holds at once
// (IssuerCaps): an issuer's key costs nothing, but each key gets only so
// many live offers and bids, whatever their IDs.
type SeqGuard struct {
	store ds.Batching
	caps  map[string]int // by kind; 0: no cap

	mu       sync.Mutex
	limits   map[string]int // IDs held of a kind, all issuers; 0: no limit
	favoured func(peer.ID) bool
	total    map[string]int // IDs held, by kind
	held     map[seqID]seqRecord
	live     map[issuerKind]int // IDs held, by issuer and kind
	dirty    map[seqID]bool     // changed since the last flush: put, or delete if no longer held
	// order lists, by kind, the IDs in the order they came (those read
	// from the datastore first, soonest to expire first), for a full
	// guard to evict the oldest stranger's; it keeps IDs that have since
	// left, which eviction skips, and is compacted as it grows.
	order map[string][]seqID
}

type issuerKind struct {
	kind   string
	issuer peer.ID
}

// IssuerCaps are how many IDs of each kind one issuer may hold live: a
// provider publishes one offer today, a renter a bid per rental.
var IssuerCaps = map[string]int{TopicOffers: 16, TopicBids: 64}

// SeqOutcome is what Advance made of a sequence number.
type SeqOutcome int

// Outcomes of Advance.
const (
	// SeqFresh: recorded; the message is new.
	SeqFresh SeqOutcome = iota
	// SeqStale: not above the one held (or equal, for gossip).
	SeqStale
	// SeqOverCap: a new ID of an issuer that holds its cap of them.
	SeqOverCap
	// SeqFull: a new ID when the guard holds its limit of the kind and
	// has no stranger's ID to evict for it.
	SeqFull
)

type seqID struct {
	kind   string
	issuer peer.ID
	id     string
}

type seqRecord struct {
	seq     uint64
	expires int64 // Unix ms
	// unrelayed: taken by book sync, its gossip copy not yet seen. That
	// copy is taken once, so this node relays it: a node that synced an
	// offer just before the offer's gossip reached it would otherwise
	// ignore the gossip, and relay it to none of its mesh. Not kept on
	// disk.
	unrelayed bool
}

var seqPrefix = ds.NewKey("/seq")

func (k seqID) key() ds.Key {
	return seqPrefix.ChildString(k.kind).ChildString(k.issuer.String()).ChildString(market.KeyPart(k.id))
}

// OpenSeqGuard reads the numbers kept in store under /seq/.
func OpenSeqGuard(ctx context.Context, store ds.Batching) (*SeqGuard, error) {
	g := &SeqGuard{store: store, caps: IssuerCaps, limits: map[string]int{}, total: map[string]int{}, held: make(map[seqID]seqRecord), live: make(map[issuerKind]int), dirty: make(map[seqID]bool), order: map[string][]seqID{}}
	res, err := store.Query(ctx, query.Query{Prefix: seqPrefix.String()})
	if err != nil {
		return nil, fmt.Errorf("seq guard: %w", err)
	}
	defer res.Close()
	for e := range res.Next() {
		if e.Error != nil {
			return nil, fmt.Errorf("seq guard: %w", e.Error)
		}
		parts := strings.Split(strings.TrimPrefix(e.Key, seqPrefix.String()+"/"), "/")
		issuer, err := peer.Decode(parts[min(1, len(parts)-1)])
		if len(parts) != 3 || err != nil || len(e.Value) != 16 {
			continue // not a record this guard wrote; it ages out of nothing
		}
		id, err := url.PathUnescape(parts[2])
		if err != nil {
			continue
		}
		k := seqID{parts[0], issuer, id}
		g.held[k] = seqRecord{seq: binary.BigEndian.Uint64(e.Value), expires: int64(binary.BigEndian.Uint64(e.Value[8:]))}
		g.live[issuerKind{parts[0], issuer}]++
		g.total[parts[0]]++
		g.order[k.kind] = append(g.order[k.kind], k)
	}
	for _, ks := range g.order {
		slices.SortFunc(ks, func(a, b seqID) int { return cmp.Compare(g.held[a].expires, g.held[b].expires) })
	}
	return g, nil
}

// SetLimit bounds the IDs of kind the guard holds, of all issuers (0: no
// bound). Keys cost an attacker nothing, so per-issuer caps alone do not
// bound it. Once full, a new ID takes the place of the oldest held of an
// issuer favoured does not name (a stranger's): a table filled with
// strangers' IDs, by a flood or read back after a restart, never locks
// out the next newcomer, and what the node vouches for is evicted last.
// IDs of issuers favoured names may fill it to twice the limit, so that
// what a node vouches for still reaches its book. A guard read back over
// twice the limit (a limit lowered since) sheds its oldest IDs at once.
func (g *SeqGuard) SetLimit(kind string, n int, favoured func(peer.ID) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limits[kind], g.favoured = n, favoured
	for n > 0 && g.total[kind] > 2*n {
		k, ok := g.oldest(kind, func(seqID) bool { return true })
		if !ok {
			break
		}
		g.drop(k)
	}
}

// SetCap bounds the live IDs of kind one issuer may hold (0: no bound).
func (g *SeqGuard) SetCap(kind string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	caps := make(map[string]int, len(g.caps)+1)
	for k, v := range g.caps {
		caps[k] = v
	}
	caps[kind] = n
	g.caps = caps
}

// Advance records seq (and the message's expiry, Unix ms) for the key if
// seq is higher than the one held, or equal when equalOK, and the issuer
// is within its cap of IDs. Gossip asks for a strictly higher seq; book
// sync accepts an equal one, so a restarted node can take back the offers
// it held. Gossip is granted an equal seq once after book sync took it,
// so that the node relays what it synced first (seqRecord.unrelayed).
func (g *SeqGuard) Advance(kind string, issuer peer.ID, id string, seq uint64, expires int64, equalOK bool) SeqOutcome {
	k := seqID{kind, issuer, id}
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.held[k]
	switch {
	case ok && h.seq == seq && !equalOK && h.unrelayed:
		h.unrelayed = false
		g.held[k] = h
		return SeqFresh
	case ok && (h.seq > seq || h.seq == seq && !equalOK):
		return SeqStale
	case ok && h.seq == seq:
		return SeqFresh
	case !ok:
		ik := issuerKind{kind, issuer}
		if c := g.caps[kind]; c > 0 && g.live[ik] >= c {
			return SeqOverCap
		}
		if l, n := g.limits[kind], g.total[kind]; l > 0 && n >= l && (n >= 2*l || g.favoured == nil || !g.favoured(issuer)) {
			old, found := g.oldest(kind, g.stranger)
			if !found {
				return SeqFull
			}
			g.drop(old)
		}
		g.live[ik]++
		g.total[kind]++
		g.order[kind] = append(g.order[kind], k)
		g.compact(kind)
	}
	g.held[k] = seqRecord{seq: seq, expires: expires, unrelayed: equalOK}
	g.dirty[k] = true
	return SeqFresh
}

// Prune forgets the records of messages that expired before nowMs and
// returns how many it dropped; the next Flush deletes them from the
// datastore. Without it every bid ever seen would stay.
func (g *SeqGuard) Prune(nowMs int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, r := range g.held {
		if r.expires < nowMs {
			g.drop(k)
			n++
		}
	}
	for kind := range g.order {
		g.compact(kind)
	}
	return n
}

// drop forgets a held record; the next Flush deletes it.
func (g *SeqGuard) drop(k seqID) {
	delete(g.held, k)
	ik := issuerKind{k.kind, k.issuer}
	if g.live[ik]--; g.live[ik] <= 0 {
		delete(g.live, ik)
	}
	g.total[k.kind]--
	g.dirty[k] = true
}

// stranger says whether the node does not vouch for k's issuer.
func (g *SeqGuard) stranger(k seqID) bool { return g.favoured == nil || !g.favoured(k.issuer) }

// evictScan bounds the IDs one eviction looks at: those of issuers
// vouched for that it passes go to the back.
const evictScan = 64

// oldest finds the oldest held ID of kind that may go; false if none
// within evictScan. It takes what it passes off the front of the order.
func (g *SeqGuard) oldest(kind string, may func(seqID) bool) (seqID, bool) {
	ks := g.order[kind]
	defer func() { g.order[kind] = ks }()
	for scanned := 0; len(ks) > 0 && scanned < evictScan; {
		k := ks[0]
		ks = ks[1:]
		if _, ok := g.held[k]; !ok {
			continue // left already
		}
		if may(k) {
			return k, true
		}
		ks = append(ks, k) // vouched for: the back of the line
		scanned++
	}
	return seqID{}, false
}

// compact drops from kind's order the IDs no longer held, once it lists
// twice what the guard holds.
func (g *SeqGuard) compact(kind string) {
	ks := g.order[kind]
	if len(ks) <= 2*g.total[kind]+64 {
		return
	}
	seen := make(map[seqID]bool, g.total[kind])
	kept := make([]seqID, 0, g.total[kind])
	for _, k := range ks {
		if _, ok := g.held[k]; ok && !seen[k] {
			seen[k] = true
			kept = append(kept, k)
		}
	}
	g.order[kind] = kept
}

// Flush writes the records changed since the last flush in one batch. On
// failure the changes stay pending for the next.
func (g *SeqGuard) Flush(ctx context.Context) error {
	g.mu.Lock()
	if len(g.dirty) == 0 {
		g.mu.Unlock()
		return nil
	}
	puts, dels := make(map[ds.Key][]byte, len(g.dirty)), make([]ds.Key, 0)
	for k := range g.dirty {
		if r, ok := g.held[k]; ok {
			var buf [16]byte
			binary.BigEndian.PutUint64(buf[:8], r.seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(r.expires))
			puts[k.key()] = buf[:]
		} else {
			dels = append(dels, k.key())
		}
	}
	flushing := g.dirty
	g.dirty = make(map[seqID]bool)
	g.mu.Unlock()

	err := g.write(ctx, puts, dels)
	if err != nil {
		g.mu.Lock()
		for k := range flushing {
			g.dirty[k] = true
		}
		g.mu.Unlock()
	}
	return err
}

func (g *SeqGuard) write(ctx context.Context, puts map[ds.Key][]byte, dels []ds.Key) error {
	b, err := g.store.Batch(ctx)
	if err != nil {
		return fmt.Errorf("seq guard: %w", err)
	}
	for k, v := range puts {
		if err := b.Put(ctx, k, v); err != nil {
			return fmt.Errorf("seq guard: %w", err)
		}
	}
	for _, k := range dels {
		if err := b.Delete(ctx, k); err != nil {
			return fmt.Errorf("seq guard: %w", err)
		}
	}
	if err := b.Commit(ctx); err != nil {
		return fmt.Errorf("seq guard: %w", err)
	}
	return nil
}
