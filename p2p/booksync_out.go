package p2p

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ByteRates bound the bytes a server sends: a sustained rate and a
// burst, in bytes.
type ByteRates struct {
	PerPeer, All Rate
}

// SyncOutRates bound what the book-sync server sends (issue 26, attack
// 10: a hundred fresh peers pulled 89 MB of book in 7 s with requests of
// a few bytes). One peer may take a whole sync at once and then one
// every ten minutes; all peers together a whole sync at once and then a
// quarter MiB a second. A sync is refused while the budget has nothing
// for the peer, and ends where the budget ends; the asker keeps what it
// got, and the rest comes by gossip or a sync with another peer.
var SyncOutRates = ByteRates{
	PerPeer: Rate{MaxSyncBytes / 600, MaxSyncBytes},
	All:     Rate{256 << 10, MaxSyncBytes},
}

// syncOut meters the bytes a book-sync server sends, per peer and in
// all: the per-peer accounts are a peerBudget in bytes (quiet peers'
// accounts go after an hour), the whole one account of another.
type syncOut struct {
	perPeer, all *peerBudget
}

func newSyncOut(r ByteRates) *syncOut {
	return &syncOut{perPeer: newPeerBudget(r.PerPeer.PerSecond, r.PerPeer.Burst), all: newPeerBudget(r.All.PerSecond, r.All.Burst)}
}

// ready says whether both p's budget and the whole have a byte for p.
func (o *syncOut) ready(p peer.ID, now time.Time) bool {
	return o.perPeer.has(p, 1, now) && o.all.has("", 1, now)
}

// take spends n bytes of p's budget and of the whole; false, spending
// neither, when either has fewer.
func (o *syncOut) take(p peer.ID, n int, now time.Time) bool {
	if !o.perPeer.has(p, float64(n), now) || !o.all.takeN("", float64(n), now) {
		return false
	}
	return o.perPeer.takeN(p, float64(n), now)
}
