package p2p

import (
	"cmp"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The connection manager's protections a Keeper holds.
const (
	NearTag   = "idlegrid-near"
	RandomTag = "idlegrid-random"
)

// Keeper chooses which connected peers the connection manager never
// trims, so that a bounded set of connections is the one a node needs:
// the nearest by measured RTT, for latency, and a random share, so that
// the set still spans the swarm (gossip spreads along long links too, and
// the DHT needs peers in its far buckets). A random peer stays chosen
// while it is connected, so that the set does not churn.
type Keeper struct {
	h      host.Host
	rtt    func(peer.ID) (time.Duration, bool)
	near   int
	random int

	mu      sync.Mutex
	rnd     *mrand.Rand
	nearSet map[peer.ID]bool
	randSet map[peer.ID]bool
}

// NewKeeper keeps near peers of least rtt and random others connected to
// h. It protects nothing until Refresh.
func NewKeeper(h host.Host, rtt func(peer.ID) (time.Duration, bool), near, random int) *Keeper {
	return &Keeper{
		h: h, rtt: rtt, near: near, random: random,
		rnd:     mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
		nearSet: map[peer.ID]bool{}, randSet: map[peer.ID]bool{},
	}
}

// Refresh chooses again among the peers connected now: the nearest that
// have a measured RTT, and random others to make up the random share
// where chosen ones left. It protects the chosen and lets go of the rest.
func (k *Keeper) Refresh() {
	k.mu.Lock()
	defer k.mu.Unlock()
	type measured struct {
		p peer.ID
		d time.Duration
	}
	peers := k.h.Network().Peers()
	var ms []measured
	for _, p := range peers {
		if d, ok := k.rtt(p); ok {
			ms = append(ms, measured{p, d})
		}
	}
	slices.SortFunc(ms, func(a, b measured) int { return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.p, b.p)) })
	near := map[peer.ID]bool{}
	for _, m := range ms[:min(len(ms), k.near)] {
		near[m.p] = true
	}
	random := map[peer.ID]bool{}
	for p := range k.randSet {
		if !near[p] && k.h.Network().Connectedness(p) == network.Connected {
			random[p] = true
		}
	}
	var pool []peer.ID
	for _, p := range peers {
		if !near[p] && !random[p] {
			pool = append(pool, p)
		}
	}
	k.rnd.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	for _, p := range pool[:min(len(pool), max(0, k.random-len(random)))] {
		random[p] = true
	}
	cm := k.h.ConnManager()
	swap := func(tag string, was, now map[peer.ID]bool) {
		for p := range now {
			cm.Protect(p, tag)
		}
		for p := range was {
			if !now[p] {
				cm.Unprotect(p, tag)
			}
		}
	}
	swap(NearTag, k.nearSet, near)
	swap(RandomTag, k.randSet, random)
	k.nearSet, k.randSet = near, random
}

// Near reports whether p is protected as one of the nearest peers.
func (k *Keeper) Near(p peer.ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.nearSet[p]
}

// Random reports whether p is protected as one of the random share.
func (k *Keeper) Random(p peer.ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.randSet[p]
}

// BoundHost returns h as the node's libraries see it: with cm as its
// connection manager, where only a Keeper's tags (NearTag, RandomTag)
// and a kept shard's (ShardTag) protect. Any other protection, gossipsub's of its mesh peers on every
// topic and kad-dht's of the peers in its two farthest buckets, becomes a
// tag of value ProtectValue: a peer so marked is trimmed only after every
// peer worth less, but it can be. Left as protection, those reach 40 to 50
// of 60 peers in a small swarm, and no bound holds. With b.High set, a
// bounder holds the node to that many peers (see Bound) until the host
// closes; h must not have connected yet, since the bounder counts the
// connections it is told of.
func BoundHost(h host.Host, cm connmgr.ConnManager, b Bound) host.Host {
	bh := &boundHost{Host: h, cm: keeperConnMgr{cm}}
	if b.High > 0 {
		bh.bd = newBounder(h, bh.cm, b)
	}
	return bh
}

// ProtectValue is the tag value a library's protection becomes.
const ProtectValue = 100

type boundHost struct {
	host.Host
	cm keeperConnMgr
	bd *bounder // nil: no hard bound
}

func (h *boundHost) ConnManager() connmgr.ConnManager { return h.cm }

func (h *boundHost) Close() error {
	if h.bd != nil {
		h.bd.stop()
	}
	return h.Host.Close()
}

// keeperConnMgr reserves protection to the Keeper's tags.
type keeperConnMgr struct{ connmgr.ConnManager }

func keeperTag(tag string) bool {
	return tag == NearTag || tag == RandomTag || strings.HasPrefix(tag, ShardTag)
}

// asValue is the tag another library's protection becomes.
func asValue(tag string) string { return "protect:" + tag }

func (c keeperConnMgr) Protect(p peer.ID, tag string) {
	if keeperTag(tag) {
		c.ConnManager.Protect(p, tag)
		return
	}
	c.ConnManager.TagPeer(p, asValue(tag), ProtectValue)
}

func (c keeperConnMgr) Unprotect(p peer.ID, tag string) bool {
	if keeperTag(tag) {
		return c.ConnManager.Unprotect(p, tag)
	}
	c.ConnManager.UntagPeer(p, asValue(tag))
	return c.IsProtected(p, "")
}

func (c keeperConnMgr) IsProtected(p peer.ID, tag string) bool {
	if keeperTag(tag) || c.ConnManager.IsProtected(p, tag) {
		return c.ConnManager.IsProtected(p, tag)
	}
	info := c.ConnManager.GetTagInfo(p)
	if info == nil {
		return false
	}
	if tag == "" {
		for t := range info.Tags {
			if strings.HasPrefix(t, "protect:") {
				return true
			}
		}
		return false
	}
	_, ok := info.Tags[asValue(tag)]
	return ok
}
