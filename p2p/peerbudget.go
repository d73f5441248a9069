package p2p

import (
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// peerBudget meters what each peer hands this node on one topic: a token
// bucket per peer, refilled at rate per second up to burst. A message
// beyond it is ignored unread (MarketValidator.metered says when a
// message is checked all the same), and every message a peer sends
// beyond its budget counts as excess, which lowers the peer's gossipsub
// score through the application-specific score (and decays by half each
// excessHalfLife), so a peer that floods, valid spam or not, is pruned
// and then graylisted like one that relays forgeries. The same bucket,
// with one account, meters all strangers' messages together.
//
// Its mutex guards the accounts; it is held for no I/O. Accounts of
// peers quiet for an hour are dropped, so memory follows the peers that
// are connected.
type peerBudget struct {
	rate, burst float64

	mu       sync.Mutex
	accounts map[peer.ID]*account
	swept    time.Time
}

type account struct {
	tokens float64
	last   time.Time // of the last refill
	excess float64   // decayed to excessAt
	at     time.Time
}

// excessHalfLife is how long a peer's excess takes to halve.
const excessHalfLife = time.Minute

func newPeerBudget(rate, burst float64) *peerBudget {
	return &peerBudget{rate: rate, burst: burst, accounts: make(map[peer.ID]*account)}
}

func (b *peerBudget) account(p peer.ID, now time.Time) *account {
	if now.Sub(b.swept) > 10*time.Minute {
		for id, a := range b.accounts {
			if now.Sub(a.last) > time.Hour && now.Sub(a.at) > time.Hour {
				delete(b.accounts, id)
			}
		}
		b.swept = now
	}
	a := b.accounts[p]
	if a == nil {
		a = &account{tokens: b.burst, last: now, at: now}
		b.accounts[p] = a
	}
	return a
}

// take spends one token of p's at now; false, and one unit of excess,
// when it has none.
func (b *peerBudget) take(p peer.ID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.account(p, now)
	a.tokens = min(b.burst, a.tokens+now.Sub(a.last).Seconds()*b.rate)
	a.last = now
	if a.tokens >= 1 {
		a.tokens--
		return true
	}
	a.addExcess(1, now)
	return false
}

func (a *account) decayed(now time.Time) float64 {
	return a.excess * math.Exp2(-now.Sub(a.at).Seconds()/excessHalfLife.Seconds())
}

func (a *account) addExcess(n float64, now time.Time) {
	a.excess, a.at = a.decayed(now)+n, now
}

// excess is p's decayed excess at now.
func (b *peerBudget) excess(p peer.ID, now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.accounts[p]; a != nil {
		return a.decayed(now)
	}
	return 0
}

// sharedBudget is a budget all peers draw on together, shared fairly. A
// pool, refilled at rate per second up to burst, holds what all of them
// may take, and a peer takes only from its share, a bucket of its own
// that it fills from the pool. The peers fall in two classes (class
// says which; nil: all in one): those in this node's gossip mesh, whose
// slots are few (D_hi a topic) and kept by score, and the rest, whose
// number is the number of connections an attacker cares to open. Each
// class that drew in the last shareWindow gets an equal part of nine
// tenths of the rate, split equally among its peers that drew, so a
// share fills at 0.9·rate/(classes·n) a second, up to
// max(burst/(2·classes·n), minShare) (a peer new to it fills its share
// at once, if the pool holds enough). What a class moves from the pool
// into its shares is metered too, by a bucket of its own refilled at
// rate/classes up to half the burst (classBurst): a class alone may use
// the whole rate, never more than half the burst, so however many peers
// of one class arrive at once (each filling a new share), the pool keeps
// half its burst for the other.
//
// So all peers together take at most the pool's burst and its rate,
// however many connect (a connection is not trust); a peer that floods
// spends its own share, not the others'; a hundred connections take the
// mesh's relays no more than half of the budget, even those that came
// while the mesh was quiet; and since the shares fill at nine tenths of
// the pool's rate, the pool keeps a reserve from which a peer that
// relays little fills its share.
//
// Its mutex guards the buckets; it is held for no I/O (class must do
// none). Shares of peers quiet for a few windows go back to the pool, so
// memory follows the peers that draw on it.
type sharedBudget struct {
	rate, burst float64
	class       func(peer.ID) int // 0 or 1; nil: 0

	mu        sync.Mutex
	pool      bucket
	classes   [2]bucket // what each class may move from the pool
	shares    map[peer.ID]*share
	active    [2]int    // peers of each class that drew within shareWindow, as of countedAt
	countedAt time.Time // of active
}

type share struct {
	bucket
	class int
}

type bucket struct {
	tokens float64
	last   time.Time // of the last refill
	used   time.Time // of the last draw
}

// refill adds rate per second since the last refill, up to most.
func (k *bucket) refill(now time.Time, rate, most float64) {
	if now.After(k.last) {
		k.tokens = min(most, k.tokens+now.Sub(k.last).Seconds()*rate)
		k.last = now
	}
}

const (
	// shareWindow is how recently a peer must have drawn on a shared
	// budget to count among those it is shared by.
	shareWindow = 10 * time.Second
	// minShare is the smallest a share holds: a peer may always pass on
	// a message or two, if the pool has them.
	minShare = 2
	// shareRate is the part of a shared budget's rate that fills shares;
	// the rest keeps the pool's reserve.
	shareRate = 0.9
)

func newSharedBudget(rate, burst float64) *sharedBudget {
	return &sharedBudget{rate: rate, burst: burst, shares: make(map[peer.ID]*share)}
}

// classBurst is the most a class may move from the pool at once: half
// the burst, or all of it where the peers are all of one class.
func (b *sharedBudget) classBurst() float64 {
	if b.class == nil {
		return b.burst
	}
	return b.burst / 2
}

// count recounts the active peers, and returns to the pool the shares of
// those quiet for six windows, at most once a second.
func (b *sharedBudget) count(now time.Time) {
	if now.Sub(b.countedAt) < time.Second {
		return
	}
	b.active = [2]int{}
	for p, s := range b.shares {
		switch quiet := now.Sub(s.used); {
		case quiet < shareWindow:
			b.active[s.class]++
		case quiet > 6*shareWindow:
			b.pool.tokens = min(b.burst, b.pool.tokens+s.tokens)
			delete(b.shares, p)
		}
	}
	b.countedAt = now
}

// take spends one token of p's share at now, filling it from the pool
// first; false when it has none.
func (b *sharedBudget) take(p peer.ID, now time.Time) bool {
	c := 0
	if b.class != nil && b.class(p) == 1 {
		c = 1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pool.last.IsZero() {
		b.pool = bucket{tokens: b.burst, last: now}
		b.classes = [2]bucket{{tokens: b.classBurst(), last: now}, {tokens: b.classBurst(), last: now}}
	}
	b.pool.refill(now, b.rate, b.burst)
	b.count(now)
	s := b.shares[p]
	if s == nil || now.Sub(s.used) >= shareWindow || s.class != c {
		if s != nil && now.Sub(s.used) < shareWindow && b.active[s.class] > 0 {
			b.active[s.class]-- // p changed class
		}
		b.active[c]++ // p draws now, whether or not the last count saw it
	}
	classes := 1.0
	if b.active[0] > 0 && b.active[1] > 0 {
		classes = 2
	}
	class := &b.classes[c]
	class.refill(now, b.rate/classes, b.classBurst())
	n := classes * float64(max(b.active[c], 1))
	most := max(b.burst/(2*n), minShare)
	want := most // a new share fills at once
	if s == nil {
		s = &share{bucket: bucket{last: now}}
		b.shares[p] = s
		if short := want - min(b.pool.tokens, class.tokens); short > 0 {
			b.reclaim(c, most, short)
		}
	} else {
		want = max(0, now.Sub(s.last).Seconds()) * shareRate * b.rate / n
	}
	s.class, s.last, s.used = c, now, now
	moved := max(0, min(want, most-s.tokens, b.pool.tokens, class.tokens))
	s.tokens += moved
	b.pool.tokens -= moved
	class.tokens -= moved
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// reclaim returns to the pool, and to class c's bucket, up to need
// tokens that shares of class c hold beyond most, the part of each now:
// a share filled at once while few peers drew holds more than its part
// once more draw, and a peer that arrives a moment after the first must
// not find the class's burst in that one share. A peer with no share
// yet calls it, for what the pool or the class lacks of its part; the
// shares keep the rest, so a class still moves its burst at once.
func (b *sharedBudget) reclaim(c int, most, need float64) {
	for _, s := range b.shares {
		if need <= 0 {
			return
		}
		if s.class != c || s.tokens <= most {
			continue
		}
		back := min(s.tokens-most, need)
		s.tokens -= back
		need -= back
		b.pool.tokens = min(b.burst, b.pool.tokens+back)
		b.classes[c].tokens = min(b.classBurst(), b.classes[c].tokens+back)
	}
}

// issuerBudget meters what one issuer's key gets into this node, however
// it came: a token bucket per issuer, refilled at rate per second up to
// burst. Keys cost nothing, so its accounts are bounded: one whose bucket
// has filled again is dropped (a new one starts full, so nothing is
// lost), and past maxIssuerAccounts a key with no account gets none.
//
// Its mutex guards the accounts; it is held for no I/O.
type issuerBudget struct {
	rate, burst float64

	mu       sync.Mutex
	accounts map[peer.ID]*bucket
	swept    time.Time
}

// maxIssuerAccounts bounds the issuers metered at once, per topic kind.
const maxIssuerAccounts = 100_000

func newIssuerBudget(rate, burst float64) *issuerBudget {
	return &issuerBudget{rate: rate, burst: burst, accounts: make(map[peer.ID]*bucket)}
}

// full is how long an account takes to fill from empty: one quiet that
// long is as good as new.
func (b *issuerBudget) full() time.Duration {
	return time.Duration(b.burst / b.rate * float64(time.Second))
}

func (b *issuerBudget) sweep(now time.Time) {
	for p, a := range b.accounts {
		if now.Sub(a.last) >= b.full() {
			delete(b.accounts, p)
		}
	}
	b.swept = now
}

// has says whether p has a token at now, creating nothing.
func (b *issuerBudget) has(p peer.ID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.accounts[p]
	if a == nil {
		return len(b.accounts) < maxIssuerAccounts || now.Sub(b.swept) >= time.Second
	}
	a.refill(now, b.rate, b.burst)
	return a.tokens >= 1
}

// take spends one of p's tokens at now; false when it has none, or it has
// no account and there is no room for one.
func (b *issuerBudget) take(p peer.ID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) > b.full() || len(b.accounts) >= maxIssuerAccounts && now.Sub(b.swept) >= time.Second {
		b.sweep(now)
	}
	a := b.accounts[p]
	if a == nil {
		if len(b.accounts) >= maxIssuerAccounts {
			return false
		}
		a = &bucket{tokens: b.burst, last: now}
		b.accounts[p] = a
	}
	a.refill(now, b.rate, b.burst)
	if a.tokens < 1 {
		return false
	}
	a.tokens--
	return true
}

// has says whether p holds n tokens at now, spending none.
func (b *peerBudget) has(p peer.ID, n float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.account(p, now)
	a.tokens = min(b.burst, a.tokens+now.Sub(a.last).Seconds()*b.rate)
	a.last = now
	return a.tokens >= n
}

// takeN spends n of p's tokens at now; false, spending none and counting
// no excess, when it holds fewer.
func (b *peerBudget) takeN(p peer.ID, n float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.account(p, now)
	a.tokens = min(b.burst, a.tokens+now.Sub(a.last).Seconds()*b.rate)
	a.last = now
	if a.tokens < n {
		return false
	}
	a.tokens -= n
	return true
}
