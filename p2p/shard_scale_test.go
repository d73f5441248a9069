//go:build !race

package p2p_test

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

var shardNodes = flag.Int("shards", 0, "TestSimulatedShards measures a bounded swarm of this many nodes (default 40) gossiping offers of 10 GPU families, half its nodes following one family each, half every family")

// shardFamilies are the 10 families TestSimulatedShards' offers are of.
var shardFamilies = []string{"h100", "a100", "h200", "l40s", "rtx4090", "a10", "l4", "b200", "v100", "t4"}

// Offers gossiped on shards, in simulated time (p2ptest.Simulate), on a
// bounded swarm with the daemon's intervals: every other node (the
// bootstrap among them) follows every family on the offers topic, as a
// node of the last version does; the rest each follow one family of 10.
// Once the shards' meshes form, one offer a second for two minutes, of
// the 10 families in turn, is published on its shard and on the offers
// topic, from nodes spread over the swarm. Every offer must reach every
// node that follows every family, and a node that follows one family
// gets its family's offers alone. The test logs, for each kind of node,
// the bytes it moved per minute (every protocol, and gossip's share),
// the offers it holds, the share of the deliveries due to it that came
// within a minute of the last offer (a shard's gossip is best effort: a
// follower's next book sync brings what it missed), and the delivery p50
// and p99.
//
//	go test ./p2p -run TestSimulatedShards -shards 200 -v -timeout 60m
func TestSimulatedShards(t *testing.T) {
	n := 40
	if *shardNodes > 0 {
		n = *shardNodes
	}
	p2ptest.Simulate(t, func(t *testing.T) { measureShards(t, n) })
}

func measureShards(t *testing.T, n int) {
	const ping, find, window = 30 * time.Second, time.Minute, 2 * time.Minute
	lat := planetLabRows(t, 0, 200)
	if n > len(lat) {
		lat = lat.Expand(n, 0.1, 7)
	}
	follow := func(i int) []string {
		if i%2 == 0 {
			return nil
		}
		return []string{shardFamilies[(i/2)%len(shardFamilies)]}
	}
	s := p2ptest.NewMocknet(t, n, p2ptest.WithLatency(lat, 0), p2ptest.WithTraffic(), p2ptest.WithLazyLinks(),
		p2ptest.WithBounds(32, 64, 20*time.Second), p2ptest.WithIntervals(find, 15*find), p2ptest.WithLocality(ping, 8, 8),
		p2ptest.WithShards(follow))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(1, n/200))*30*time.Minute)
	defer cancel()
	start := time.Now()
	if err := waitBounded(ctx, s, 64); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitMeshOf(ctx, 1, p2p.TopicEvidence); err != nil { // every node's; the offers topic is half the nodes'
		t.Fatal(err)
	}
	for !shardMeshesJoined(s) {
		if ctx.Err() != nil {
			t.Fatal("the shards' meshes did not form")
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d nodes formed, shards' meshes joined, in %s", n, time.Since(start).Round(time.Second))
	time.Sleep(time.Minute) // the first ping rounds and lookups pass
	for _, nd := range s.Nodes {
		nd.Traffic.Reset()
	}
	offers := int(window / time.Second)
	from, fams := spread(n, offers), make([]string, offers)
	for k := range fams {
		fams[k] = shardFamilies[k%len(shardFamilies)]
	}
	s.DeliverBytes = offerBytes
	began := time.Now()
	// A shard's gossip from a node that follows it not is best effort
	// (a follower that misses an offer has it from its next book sync):
	// what arrived within a minute of the last offer is counted.
	dctx, dcancel := context.WithTimeout(ctx, window+time.Minute)
	delays, err := s.DeliverShards(dctx, p2p.TopicOffers, from, fams, time.Second)
	dcancel()
	if err != nil && delays == nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Logf("not every delivery: %v", err)
	}
	time.Sleep(5 * time.Second) // gossip's history: 3 heartbeats of IHAVE
	minutes := time.Since(began).Minutes()

	type class struct {
		name          string
		bytes, gossip []float64 // per node per minute
		held          []int     // offers delivered
		due           int       // offers of the node's shards, all its nodes
		delays        []time.Duration
	}
	all, one := &class{name: "every family"}, &class{name: "one family"}
	for i, nd := range s.Nodes {
		if i == 0 {
			continue // the bootstrap node
		}
		c := all
		if len(nd.Shards) > 0 {
			c = one
		}
		sent, received := nd.Traffic.Bytes()
		c.bytes = append(c.bytes, float64(sent+received)/minutes)
		var g int64
		for p, b := range nd.Traffic.ByProtocol() {
			if p2ptest.Family(p) == "gossip" {
				g += b
			}
		}
		c.gossip = append(c.gossip, float64(g)/minutes)
		held := 0
		for k := range delays {
			if len(nd.Shards) == 0 || slices.Contains(nd.Shards, fams[k]) {
				c.due++
			}
			if d := delays[k][i]; d >= 0 {
				held++
				if from[k] != i {
					c.delays = append(c.delays, d)
				}
				if len(nd.Shards) > 0 && !slices.Contains(nd.Shards, fams[k]) {
					t.Errorf("node %d, following %v, holds offer %d of %s", i, nd.Shards, k, fams[k])
				}
			}
		}
		c.held = append(c.held, held)
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	medianInt := func(xs []int) int { slices.Sort(xs); return xs[len(xs)/2] }
	for _, c := range []*class{all, one} {
		got := 0
		for _, h := range c.held {
			got += h
		}
		t.Logf("%d nodes, %s (%d nodes): %.1f KB/min (gossip %.1f), holds %d offers (%.1f KB), %d of %d deliveries (%.2f%%), delivery p50 %v p99 %v",
			n, c.name, len(c.bytes), median(c.bytes)/1e3, median(c.gossip)/1e3, medianInt(c.held), float64(medianInt(c.held)*offerBytes)/1e3,
			got, c.due, 100*float64(got)/float64(c.due), pct(c.delays, 0.5), pct(c.delays, 0.99))
	}
	t.Logf("a node that follows one family of 10, to one that follows every family: %.2fx less traffic (%.2fx less gossip), %.1fx less book; delivery p99 %.2fx",
		median(all.bytes)/median(one.bytes), median(all.gossip)/median(one.gossip),
		float64(medianInt(all.held))/float64(medianInt(one.held)), float64(pct(one.delays, 0.99))/float64(pct(all.delays, 0.99)))
	for i, h := range all.held {
		if h != offers {
			t.Errorf("a node that follows every family (the %dth) holds %d offers, want all %d: the whole topic is gossip's to deliver", i, h, offers)
		}
	}
}

// shardMeshesJoined says whether every node that follows shards has a
// mesh peer on each.
func shardMeshesJoined(s *p2ptest.Swarm) bool {
	for _, nd := range s.Nodes {
		for _, sh := range nd.Shards {
			if len(nd.Gossip.ShardMesh(p2p.TopicOffers, sh)) == 0 {
				return false
			}
		}
	}
	return true
}

// followersKnowEachOther says whether each of the followers' routers
// knows every other as a follower of shard.
func followersKnowEachOther(s *p2ptest.Swarm, followers []int, shard string) bool {
	for _, i := range followers {
		known := s.Nodes[i].Gossip.ShardPeers(p2p.TopicOffers, shard)
		for _, j := range followers {
			if j != i && !slices.Contains(known, s.Nodes[j].Host.ID()) {
				return false
			}
		}
	}
	return true
}

// repairBound is how soon a router has again a connected peer it lacks
// on a topic the peer follows (p2p.RouterRepairs): a sweep's second to
// notice, 5 s to be due, a second's pause, the dial, and a heartbeat to
// graft it.
const repairBound = 10 * time.Second

// Followers of a shard find each other at its rendezvous and hold their
// mesh: in a swarm of 40 nodes that each hold at most 12 connections, the
// 3 nodes that follow the H100 shard are grafted into one mesh, and
// offers two of them publish reach the third, and every node by the
// offers topic. In simulated time.
//
// A node that follows no shard reaches its followers to publish
// (p2p.ReachShard), which DeliverShards does; its gossip is best effort
// (a follower that misses it has it from its next book sync), and
// TestSimulatedShards measures it.
func TestAShardsFollowersFindEachOther(t *testing.T) {
	p2ptest.Simulate(t, func(t *testing.T) {
		const n = 40
		followers := []int{10, 20, 30}
		follow := func(i int) []string {
			if slices.Contains(followers, i) {
				return []string{"h100"}
			}
			return nil
		}
		s := p2ptest.NewMocknet(t, n, p2ptest.WithLatency(planetLabRows(t, 0, n), 0), p2ptest.WithLazyLinks(),
			p2ptest.WithBounds(8, 12, 20*time.Second), p2ptest.WithIntervals(time.Minute, 15*time.Minute), p2ptest.WithShards(follow))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		if err := s.WaitMeshOf(ctx, 1, p2p.TopicEvidence); err != nil {
			t.Fatal(err)
		}
		joined := func() bool { return shardMeshesJoined(s) && followersKnowEachOther(s, followers, "h100") }
		for !joined() {
			if ctx.Err() != nil {
				t.Fatal("the H100 shard's followers did not find each other in 30 simulated minutes")
			}
			time.Sleep(time.Second)
		}
		// A minute of bounders trimming: the followers' links hold. Where
		// a router lost a follower meanwhile (p2p.RouterRepairs), the
		// follower is back within repairBound; a follower the bounder
		// closed would be looked for again only a FindInterval later.
		time.Sleep(time.Minute)
		waitUntil(t, repairBound, "the H100 shard's followers have their mesh a minute after it formed", joined)
		dctx, dcancel := context.WithTimeout(ctx, time.Minute)
		defer dcancel()
		if _, err := s.DeliverShards(dctx, p2p.TopicOffers, followers[:2], []string{"h100", "h100"}, time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
