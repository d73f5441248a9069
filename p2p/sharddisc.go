package p2p

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A shard's followers find each other at the shard's rendezvous in the
// DHT, as the swarm's nodes do at the swarm's: a node that follows a few
// families among many would otherwise be connected (32 to 64 peers of
// thousands) to hardly any of the few nodes that follow the same ones,
// and the shard's mesh would fall apart. Each follower advertises there
// and keeps ShardWant followers connected; gossipsub then protects its
// mesh peers from the connection manager. A node that publishes on a
// shard it does not follow looks the shard up when it knows none of its
// followers, and publishes to those (pubsub's fanout).

// ShardWant is how many connected followers of a shard a follower keeps:
// gossipsub's D_lo, so that the shard's mesh can form.
const ShardWant = 4

// ShardRendezvous is the namespace under which a shard's followers
// advertise: /idlegrid/<id>/shard/<shard>.
func (s Swarm) ShardRendezvous(shard string) string {
	return "/idlegrid/" + s.ID() + "/shard/" + shard
}

// FindShard looks up to n followers of a shard at its rendezvous and
// dials each that is not connected as the lookup finds it, all within
// ctx; it returns those it dialled that answered. It protects each it
// dials with the shard's ShardTag, within ShardWant for the shard and
// ShardProtected for all: the followers a publisher reaches stay its way
// to the shard, and KeepShard trades those of a shard it keeps for the
// followers it has.
func (d *Discovery) FindShard(ctx context.Context, shard string, n int) ([]peer.ID, error) {
	if err := ValidateShard(shard); err != nil {
		return nil, err
	}
	// The lookup runs until it finds n+1 records (this node's may be one)
	// or has asked the peers nearest the key, which may take the whole
	// of ctx: a follower is dialled as soon as it is found.
	found, err := d.rd.FindPeers(ctx, d.cfg.Swarm.ShardRendezvous(shard), discovery.Limit(n+1))
	if err != nil {
		return nil, fmt.Errorf("shard %s rendezvous: %w", shard, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var dialled []peer.ID
	tried := 0
	for ai := range found {
		if ai.ID == d.h.ID() || len(ai.Addrs) == 0 || d.h.Network().Connectedness(ai.ID) == network.Connected || tried == n {
			continue
		}
		tried++
		// Kept before it connects: a node at its bound would close a new
		// peer it shares no mesh with at once, before the router hears
		// it follows the shard.
		d.protectAlso(shard, ai.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.connect(ctx, ai); err != nil {
				d.log.Debug("shard dial failed", "shard", shard, "peer", ai.ID, "err", err)
				return
			}
			mu.Lock()
			dialled = append(dialled, ai.ID)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return dialled, nil
}

// KeepShard advertises this node as a follower of a shard, again before
// each record's TTL runs out, and while followers() (the followers it
// knows, Gossip.ShardPeers: the router forgets a peer whose streams
// close) are fewer than ShardWant looks for more, every FindInterval,
// until the discovery closes. It protects up to ShardWant of them from
// the connection manager and the bound (ShardTag), within
// ShardProtected for all shards: a shard's few followers would
// otherwise be the first peers a full node closes, their mesh tags on
// one topic worth less than its other peers' on three. It returns at
// once; the loop runs on the discovery's context (Start must have run).
func (d *Discovery) KeepShard(shard string, followers func() []peer.ID) error {
	if err := ValidateShard(shard); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || d.closed {
		return fmt.Errorf("keep shard %s: discovery not running", shard)
	}
	if d.kept[shard] {
		return nil
	}
	d.kept[shard] = true
	d.wg.Add(1)
	go d.keepShard(d.ctx, shard, followers)
	return nil
}

func (d *Discovery) keepShard(ctx context.Context, shard string, followers func() []peer.ID) {
	defer d.wg.Done()
	defer d.protectShard(shard, nil)
	ns := d.cfg.Swarm.ShardRendezvous(shard)
	wait := 100 * time.Millisecond
	var readvertiseAt time.Time
	protect := time.NewTicker(shardProtectEvery)
	defer protect.Stop()
	round := time.NewTimer(0)
	defer round.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-protect.C:
			// A follower that dialled this node is kept as soon as the
			// router hears it: a full node would close it first.
			for _, p := range followers() {
				d.protectAlso(shard, p)
			}
			continue
		case <-round.C:
		}
		if d.dht.RoutingTable().Size() > 0 {
			if d.cfg.Server && time.Now().After(readvertiseAt) {
				if ttl, err := d.rd.Advertise(ctx, ns); err != nil {
					d.log.Debug("shard advertise failed", "ns", ns, "err", err)
				} else {
					readvertiseAt = time.Now().Add(ttl * 7 / 8)
				}
			}
			have := followers()
			d.protectShard(shard, have)
			if len(have) < ShardWant {
				lctx, cancel := context.WithTimeout(ctx, d.cfg.FindInterval)
				dialled, err := d.FindShard(lctx, shard, ShardWant-len(have))
				if err != nil {
					d.log.Debug("shard lookup failed", "shard", shard, "err", err)
				}
				cancel()
				// They advertised it: kept (FindShard kept them) until the
				// router hears them say so.
				d.protectShard(shard, append(have, dialled...))
			}
		}
		wait = min(2*wait, d.cfg.FindInterval)
		if !readvertiseAt.IsZero() {
			wait = min(wait, max(time.Until(readvertiseAt), time.Second))
		}
		round.Reset(wait)
	}
}

// shardProtectEvery is how often KeepShard protects the followers that
// came to it since it last looked.
const shardProtectEvery = time.Second

// ReachShard makes sure, before a node publishes on a shard it does not
// follow, that it knows followers of the shard to publish to: where it
// knows none, it looks them up (FindShard) and returns as soon as the
// router has heard one say it follows the shard, or when ctx ends. A
// shard no one follows is looked up each time, in vain; ctx bounds it.
func ReachShard(ctx context.Context, g *Gossip, d *Discovery, kind, shard string) error {
	if len(g.ShardPeers(kind, shard)) > 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		dialled []peer.ID
		err     error
	}
	looked := make(chan result, 1)
	go func() {
		dialled, err := d.FindShard(ctx, shard, ShardWant)
		looked <- result{dialled, err}
	}()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for len(g.ShardPeers(kind, shard)) == 0 {
		select {
		case r := <-looked: // the lookup and its dials are done; the router hears the dialled say what they follow a moment later
			if r.err == nil && len(r.dialled) == 0 {
				r.err = fmt.Errorf("no follower of shard %s found", shard)
			}
			if r.err != nil {
				return r.err
			}
			looked = nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// ShardTag is the connection manager's protection of the followers of
// a shard a node keeps (KeepShard): ShardTag + the shard.
const ShardTag = "idlegrid-shard/"

// ShardProtected bounds the peers protected by ShardTag, for all the
// shards a node keeps: with the Keeper's near and random peers (8 and 8
// by default), a bounded node's protected peers stay well under its
// high-water mark of 64.
const ShardProtected = 16

// protectAlso protects p with a shard's ShardTag, where the shard has
// fewer than ShardWant protected and all shards fewer than
// ShardProtected.
func (d *Discovery) protectAlso(shard string, p peer.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	all := 0
	for _, ps := range d.protected {
		all += len(ps)
	}
	ps := d.protected[shard]
	if ps[p] || len(ps) >= ShardWant || all >= ShardProtected {
		return
	}
	if ps == nil {
		ps = map[peer.ID]bool{}
		d.protected[shard] = ps
	}
	ps[p] = true
	d.h.ConnManager().Protect(p, ShardTag+shard)
}

// protectShard protects up to ShardWant of peers (in order) with the
// shard's ShardTag, within ShardProtected for all shards, and unprotects
// the shard's others; nil unprotects them all.
func (d *Discovery) protectShard(shard string, peers []peer.ID) {
	cm, tag := d.h.ConnManager(), ShardTag+shard
	d.mu.Lock()
	defer d.mu.Unlock()
	prev := d.protected[shard]
	others := 0
	for sh, ps := range d.protected {
		if sh != shard {
			others += len(ps)
		}
	}
	next := map[peer.ID]bool{}
	for _, p := range peers {
		if len(next) == ShardWant || others+len(next) == ShardProtected {
			break
		}
		next[p] = true
	}
	for p := range prev {
		if !next[p] {
			cm.Unprotect(p, tag)
		}
	}
	for p := range next {
		if !prev[p] {
			cm.Protect(p, tag)
		}
	}
	if len(next) == 0 {
		delete(d.protected, shard)
	} else {
		d.protected[shard] = next
	}
}
