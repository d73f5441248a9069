package trust

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/idlegrid/idlegrid/market/reputation"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bounds of the receipts learned from peers. Keys cost nothing, and the
// date a receipt names is its signers' choice, so the cache ranks what
// it holds by this node's trust in each receipt's better-trusted party,
// then by when this node learned it: a receipt whose parties no trust
// reaches is loose, and loose receipts share a pool of their own,
// oldest learned going first. A flood from keys with no trust path
// churns that pool and leaves every anchored receipt in place.
const (
	maxLearned        = 100_000
	maxLearnedPerPeer = 256 // naming any one peer, as renter or provider
	maxLoose          = maxLearned / 10
)

// learnedCache holds the learned receipts within those bounds. Adding
// costs what the receipt's two peers' entries cost to scan (at most
// maxLearnedPerPeer each) and a heap's logarithm, not what the whole
// cache does; anchor, after each recompute, is the one pass over all of
// it. Its owner guards it.
type learnedCache struct {
	all    map[ds.Key]*cached
	naming map[peer.ID]map[ds.Key]struct{}
	loose  []ds.Key // loose receipts in the order learned; holds keys since gone or anchored, skipped
	nLoose int      // loose receipts held
	ranked ranking  // the anchored receipts, last-ranked first; holds some since gone, skipped
	seq    uint64
}

// cached is a learned receipt as the cache ranks it.
type cached struct {
	learned
	seq   uint64  // when learned: the cache's count at the time
	trust float64 // this node's trust in its better-trusted party when last anchored; 0: loose
	gone  bool
}

// ranking is a heap of cached receipts, the one ranked last on top.
type ranking []*cached

func (h ranking) Len() int           { return len(h) }
func (h ranking) Less(i, j int) bool { return below(h[i], h[j]) }
func (h ranking) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ranking) Push(x any)        { *h = append(*h, x.(*cached)) }
func (h *ranking) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newLearnedCache() *learnedCache {
	return &learnedCache{all: map[ds.Key]*cached{}, naming: map[peer.ID]map[ds.Key]struct{}{}}
}

// below says whether a goes before b when the cache is over a bound.
func below(a, b *cached) bool {
	if a.trust != b.trust {
		return a.trust < b.trust
	}
	return a.seq < b.seq
}

func (c *learnedCache) has(k ds.Key) bool { _, ok := c.all[k]; return ok }
func (c *learnedCache) len() int          { return len(c.all) }

func (c *learnedCache) each(f func(learned)) {
	for _, e := range c.all {
		f(e.learned)
	}
}

// add holds l, its better-trusted party trusted at trust, and returns
// the keys the bounds then evict; l's own among them when it ranks last.
func (c *learnedCache) add(l learned, trust float64) []ds.Key {
	if c.has(l.key) {
		return nil
	}
	c.seq++
	e := &cached{learned: l, seq: c.seq, trust: trust}
	c.all[l.key] = e
	for _, p := range []peer.ID{l.rc.Renter, l.rc.Provider} {
		if c.naming[p] == nil {
			c.naming[p] = map[ds.Key]struct{}{}
		}
		c.naming[p][l.key] = struct{}{}
	}
	if trust == 0 {
		c.loose = append(c.loose, l.key)
		c.nLoose++
	} else {
		heap.Push(&c.ranked, e)
	}
	var gone []ds.Key
	for _, p := range []peer.ID{l.rc.Renter, l.rc.Provider} {
		for len(c.naming[p]) > maxLearnedPerPeer {
			var last *cached
			for k := range c.naming[p] {
				if x := c.all[k]; last == nil || below(x, last) {
					last = x
				}
			}
			gone = append(gone, c.drop(last.key))
		}
	}
	for c.nLoose > maxLoose || (len(c.all) > maxLearned && c.nLoose > 0) {
		gone = append(gone, c.drop(c.oldestLoose()))
	}
	for len(c.all) > maxLearned { // anchored receipts alone fill it
		if x := heap.Pop(&c.ranked).(*cached); !x.gone {
			gone = append(gone, c.drop(x.key))
		}
	}
	return gone
}

// oldestLoose is the loose receipt learned first; there is one.
func (c *learnedCache) oldestLoose() ds.Key {
	for {
		k := c.loose[0]
		c.loose = c.loose[1:]
		if e, ok := c.all[k]; ok && e.trust == 0 {
			return k
		}
	}
}

// drop forgets k and returns it.
func (c *learnedCache) drop(k ds.Key) ds.Key {
	e := c.all[k]
	e.gone = true
	delete(c.all, k)
	for _, p := range []peer.ID{e.rc.Renter, e.rc.Provider} {
		delete(c.naming[p], k)
		if len(c.naming[p]) == 0 {
			delete(c.naming, p)
		}
	}
	if e.trust == 0 {
		c.nLoose--
	}
	return k
}

// partyTrust is a receipt's rank: trust (this node's in a peer) in its
// better-trusted party.
func partyTrust(rc reputation.Receipt, trust func(peer.ID) float64) float64 {
	return max(trust(rc.Renter), trust(rc.Provider))
}

// trustIn is this node's trust in a peer as sc says.
func trustIn(sc *reputation.Scores) func(peer.ID) float64 {
	return func(p peer.ID) float64 { return sc.Of(p).Trust }
}

// anchor ranks every receipt again by trust (this node's trust in a
// peer, as just computed), and returns the keys the loose pool's bound
// then evicts: receipts whose parties lost all trust are loose again.
func (c *learnedCache) anchor(trust func(peer.ID) float64) []ds.Key {
	var loose []*cached
	c.ranked = c.ranked[:0]
	for _, e := range c.all {
		if e.trust = partyTrust(e.rc, trust); e.trust == 0 {
			loose = append(loose, e)
		} else {
			c.ranked = append(c.ranked, e)
		}
	}
	heap.Init(&c.ranked)
	slices.SortFunc(loose, func(a, b *cached) int { return cmp.Compare(a.seq, b.seq) })
	c.loose, c.nLoose = c.loose[:0], len(loose)
	for _, e := range loose {
		c.loose = append(c.loose, e.key)
	}
	var gone []ds.Key
	for c.nLoose > maxLoose {
		gone = append(gone, c.drop(c.oldestLoose()))
	}
	return gone
}
