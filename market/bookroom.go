package market

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// BookLimits bound the keys a book holds of each kind, live or
// remembered (a withdrawn or expired key keeps its seq for a while): the
// swarm has no gatekeeper and a key costs an attacker nothing, so without
// a bound a flood of valid messages from fresh keys grows the book
// without end. 0 leaves a kind unbounded.
type BookLimits struct {
	Offers int
	Bids   int
}

// DefaultBookLimits hold about a hundred times the offers and bids of a
// busy swarm today: a real offer is ~300 bytes, about 2 KiB in the book.
func DefaultBookLimits() BookLimits { return BookLimits{Offers: 50_000, Bids: 50_000} }

// Ranks are how much a node vouches for an issuer, for the book's
// eviction order: RankUnknown for any key, RankKnown for one the node
// has reason to keep (a peer it is connected to in good standing, a
// provider it attested), RankOwn for its own.
const (
	RankUnknown = 0
	RankKnown   = 1
	RankOwn     = 2
	ranks       = 3
)

// bookEntry is an offer or bid entry.
type bookEntry interface {
	comparable
	stampOf() *stamp
}

// Ranker says how a node ranks an issuer; it must be quick and do no I/O.
type Ranker func(peer.ID) int

// SetLimits bounds the book; rank orders its eviction (nil ranks every
// issuer RankUnknown), and evicted, if not nil, is told of each offer key
// evicted, in the writer's goroutine. A full book evicts from the lowest
// rank it holds, the key that arrived last first; a new key whose issuer
// ranks no higher than that is refused with ErrBookFull. So what a book
// holds is not displaced by a flood of equal standing, and what a node
// vouches for displaces what it does not. A book already over a new
// limit sheds keys as new ones arrive. Call it before the book is used.
func (b *Book) SetLimits(l BookLimits, rank Ranker, evicted func(issuer peer.ID, id string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offerRoom.max, b.bidRoom.max = l.Offers, l.Bids
	b.offerRoom.rank, b.bidRoom.rank = rank, rank
	b.evicted = evicted
}

// room tracks the keys of one kind a book holds, by rank, in the order
// they arrived, to find what a full book evicts. Its stacks keep keys
// that have since left (or changed rank); a pop skips them, and a stack
// grown to twice what it holds is compacted.
type room struct {
	max       int
	rank      Ranker
	held      [ranks]int
	stack     [ranks][]bookKey
	evictions uint64 // keys evicted to make room
}

func (r *room) rankOf(p peer.ID) int8 {
	if r.rank == nil {
		return RankUnknown
	}
	return int8(min(max(r.rank(p), 0), ranks-1))
}

func (r *room) total() int { return r.held[0] + r.held[1] + r.held[2] }

// left records that a key of rank left the book.
func (r *room) left(rank int8) { r.held[rank]-- }

// makeRoom finds room in s for a new key of issuer: its rank, and the
// key to evict first (ok false if none is needed), or ErrBookFull.
func makeRoom[V bookEntry](r *room, s *shardSet[V], issuer peer.ID) (rank int8, victim bookKey, evict bool, err error) {
	rank = r.rankOf(issuer)
	if r.max == 0 || r.total() < r.max {
		return rank, victim, false, nil
	}
	low := int8(0)
	for low < ranks-1 && r.held[low] == 0 {
		low++
	}
	if rank <= low {
		return rank, victim, false, ErrBookFull
	}
	var zero V
	st := r.stack[low]
	for len(st) > 0 {
		k := st[len(st)-1]
		st = st[:len(st)-1]
		if e := s.get(k); e != zero && e.stampOf().rank == low {
			r.stack[low] = st
			return rank, k, true, nil
		}
	}
	r.stack[low] = st
	return rank, victim, false, ErrBookFull // the counts and the stack disagree: refuse rather than grow
}

// claim makes room in s for k, a key new to the book, calling evict for
// a key that must go first, and returns k's rank; or ErrBookFull.
func claim[V bookEntry](r *room, s *shardSet[V], kind string, k bookKey, evict func(bookKey)) (int8, error) {
	rank, victim, ok, err := makeRoom(r, s, k.issuer)
	if err != nil {
		return 0, fmt.Errorf("book: %s %s/%s: %w", kind, k.issuer, k.id, err)
	}
	if ok {
		evict(victim)
	}
	return rank, nil
}

// arrived records k, just stored in s, at rank.
func arrived[V bookEntry](r *room, s *shardSet[V], k bookKey, rank int8) {
	r.held[rank]++
	r.stack[rank] = append(r.stack[rank], k)
	compact(r, s)
}

// compact drops from the stacks the keys that left s or changed rank,
// once a stack holds twice what its rank does; a key listed twice keeps
// its latest place.
func compact[V bookEntry](r *room, s *shardSet[V]) {
	var zero V
	for rank := range r.stack {
		st := r.stack[rank]
		if len(st) <= 2*r.held[rank]+64 {
			continue
		}
		seen := make(map[bookKey]bool, r.held[rank])
		kept := st[:0]
		for i := len(st) - 1; i >= 0; i-- { // newest first, to keep each key's latest place
			k := st[i]
			if e := s.get(k); e != zero && e.stampOf().rank == int8(rank) && !seen[k] {
				seen[k] = true
				kept = append(kept, k)
			}
		}
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
		clear(st[len(kept):])
		r.stack[rank] = kept
	}
}
