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
