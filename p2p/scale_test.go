//go:build !race

package p2p_test

import (
	"context"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

var (
	scaleSizes = flag.String("scale", "", "swarm sizes TestSimulatedSwarmFigures measures on the tests' rows, comma-separated (e.g. 200,500)")
	tailDraws  = flag.Int("draws", 0, "TestSimulatedSwarmFigures measures this many 200-node draws of the PlanetLab matrix beside raw gossipsub")
	churnSize  = flag.Int("churn", 0, "TestSimulatedSwarmFigures measures a bounded swarm of this many nodes whose 30% leave at once and as many join")
	expandTo   = flag.Int("expand", 0, "TestSimulatedSwarmFigures measures the whole PlanetLab matrix expanded to this many nodes beside raw gossipsub at the same bound (and, to 200 nodes, every node connected)")
)

// tailOffers is how many offers a draw's swarms time, from as many nodes:
// a p99 of 20 offers' deliveries is one of their 40 slowest, and two
// swarms of one draw differed by a fifth in it.
const tailOffers = 100

// tailMeshes is how many meshes a swarm of a tail row times its offers
// on (measureSwarmOn, measureTail): the offers topic's and 7 shards'
// that every node joins, each grafted at random from the same
// connections.
const tailMeshes = 8

// tailSwarms is how many swarms of each kind the default row forms. A
// swarm's p99 is one sample: over five swarms of its 80-node draw, each
// timing one mesh, raw gossipsub's ran from 202 to 239 ms and nearest
// first's from 228 to 242, so one run in eight or so put their ratio
// past 1.1 where its mean was 1.02. Eight meshes of one swarm did not
// settle it: their p99s move together (one swarm's ran from 203 to 226
// ms, another's from 213 to 267), so the swarm is the sample, and the
// row pools the deliveries of three.
const tailSwarms = 3

// Swarms measured in simulated time (p2ptest.Simulate) with the daemon's
// intervals, as BenchmarkBoundedSwarm measures them in real time: formed
// and settled, each node's traffic over a 2-minute window, offers from
// as many nodes, connections. The figures are the protocol's on the
// matrix's links, whatever else the machine runs.
//
// By default one draw of 80 nodes (more than a node's 64 connections)
// from other rows of the matrix than the tests' own (drawRows), as
// tailSwarms bounded swarms (the daemon's nearest-first connections) and
// as many of raw gossipsub on the same positions (every node connected
// to every other, the unbounded swarm), each timing its offers on
// tailMeshes meshes. Every offer must reach every node of each; the
// bounded swarms' p99, their deliveries pooled, must be at most 1.1
// times raw gossipsub's (nearest first must not stretch the tail), and
// the first one's nodes back within their bounds 2 simulated minutes
// after the offers.
//
// -draws 5 does the same, one swarm of each, for five 200-node draws. -expand 1000 takes
// every row of the matrix, expanded with 10% jitter to 1,000 nodes, where
// a complete graph (half a million connections) is too large to simulate:
// its reference is raw gossipsub at the same bound (randomBound), which
// asks only what nearest first changes; to 200 nodes the complete graph
// runs beside both, to calibrate one reference by the other. -scale
// 200,500 measures bounded swarms of those sizes on the tests' own rows;
// -churn 200 measures how a bounded swarm of 200 recovers when 30% of
// its nodes leave at once and as many join (measureChurn). Each logs:
//
//	go test ./p2p -run TestSimulatedSwarmFigures -draws 5 -v -timeout 180m
//	go test ./p2p -run TestSimulatedSwarmFigures -expand 1000 -v -timeout 300m
//	go test ./p2p -run TestSimulatedSwarmFigures -scale 200 -v -timeout 60m
//	go test ./p2p -run TestSimulatedSwarmFigures -churn 200 -v -timeout 60m
func TestSimulatedSwarmFigures(t *testing.T) {
	switch {
	case *scaleSizes != "":
		for f := range strings.SplitSeq(*scaleSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				t.Fatalf("-scale %q: %q is not a swarm size (2 or more nodes)", *scaleSizes, f)
			}
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				var f swarmFigures
				var took time.Duration
				p2ptest.Simulate(t, func(t *testing.T) {
					start := time.Now()
					f = measureSwarm(t, n, nearestFirst)
					took = time.Since(start)
				})
				t.Logf("simulated %d nodes for %v: %.1f KB/node/min (+%.1f amortized), offers p50 %v p99 %v, connections median %d max %d (later %d), %.2f peers/node/min closed by the bound (%.0f a node as it formed), RSS %.1f MB/node",
					n, took.Round(time.Second), f.bytesPerMin/1e3, f.amortized/1e3, f.p50, f.p99,
					f.conns[len(f.conns)/2], f.conns[len(f.conns)-1], f.connsLater[len(f.connsLater)-1], f.evictionsPerMin, f.evictionsForming, f.rssPerNode/1e6)
				checkBackWithinBounds(t, f)
			})
		}
	case *tailDraws > 0:
		for d := 1; d <= *tailDraws; d++ {
			tailRow(t, fmt.Sprintf("draw %d", d), drawRows(t, d, 200), 200, 1, unbounded)
		}
	case *expandTo > 0:
		m, err := p2ptest.PlanetLab()
		if err != nil {
			t.Fatal(err)
		}
		rows := takeRows(m, 0, len(m))
		t.Logf("the matrix's %d rows whose every pair has an RTT, expanded to %d nodes", len(rows), *expandTo)
		lat := m.Rows(rows).Expand(*expandTo, 0.1, 7)
		refs := []swarmKind{randomBound}
		if *expandTo <= 200 {
			refs = append(refs, unbounded)
		}
		tailRow(t, "every row", lat, *expandTo, 1, refs...)
	case *churnSize > 0:
		t.Run(fmt.Sprintf("churn/%d", *churnSize), func(t *testing.T) {
			p2ptest.Simulate(t, func(t *testing.T) { measureChurn(t, *churnSize) })
		})
	default:
		tailRow(t, "draw 1", drawRows(t, 1, 80), 80, tailSwarms, unbounded)
	}
}

// tailRow measures swarms swarms of the n nodes of lat nearest first and
// as each of refs, in that order, each timing its offers on tailMeshes
// meshes; it logs a row for each reference and checks the nearest-first
// tail, over every swarm's deliveries pooled, against each reference's,
// and the first nearest-first swarm's bounds.
func tailRow(t *testing.T, name string, lat p2ptest.Matrix, n, swarms int, refs ...swarmKind) {
	t.Run(fmt.Sprintf("%s/%d", strings.ReplaceAll(name, " ", ""), n), func(t *testing.T) {
		offers := min(n, tailOffers)
		raw := make([]pooledTail, len(refs))
		for i, ref := range refs {
			for range swarms {
				p2ptest.Simulate(t, func(t *testing.T) { raw[i].add(measureTail(t, lat, n, ref, offers, tailMeshes)) })
			}
		}
		var near swarmFigures
		var nearTail pooledTail
		p2ptest.Simulate(t, func(t *testing.T) { near = measureSwarmOn(t, lat, n, nearestFirst, offers, tailMeshes) })
		nearTail.add(near.tail)
		for range swarms - 1 {
			p2ptest.Simulate(t, func(t *testing.T) { nearTail.add(measureTail(t, lat, n, nearestFirst, offers, tailMeshes)) })
		}
		for i, ref := range refs {
			ratio := float64(nearTail.pct(0.99)) / float64(raw[i].pct(0.99))
			t.Logf("%s, %d nodes, %d swarms of each: %v p50 %v p99 %v (by swarm %s); nearest first p50 %v p99 %v (by swarm %s); p99 %.2fx, p50 %.2fx; nearest first %.1f KB/node/min",
				name, n, swarms, ref, raw[i].pct(0.5), raw[i].pct(0.99), raw[i].bySwarm(), nearTail.pct(0.5), nearTail.pct(0.99), nearTail.bySwarm(),
				ratio, float64(nearTail.pct(0.5))/float64(raw[i].pct(0.5)), near.bytesPerMin/1e3)
			if ratio > 1.1 {
				t.Errorf("%s: nearest-first p99 %v is %.2f times that of %v, %v, past 1.1", name, nearTail.pct(0.99), ratio, ref, raw[i].pct(0.99))
			}
		}
		checkBackWithinBounds(t, near)
	})
}

// pooledTail is the offers' delays of several swarms of one kind.
type pooledTail struct {
	all  []time.Duration
	p99s []string
}

func (p *pooledTail) add(ds []time.Duration) {
	p.all = append(p.all, ds...)
	p.p99s = append(p.p99s, pct(ds, 0.99).String())
}

func (p *pooledTail) pct(q float64) time.Duration { return pct(p.all, q) }

func (p *pooledTail) bySwarm() string { return strings.Join(p.p99s, ", ") }

// checkBackWithinBounds checks that a bounded swarm's nodes were back
// within the high-water mark 2 simulated minutes after the offers.
func checkBackWithinBounds(t *testing.T, f swarmFigures) {
	t.Helper()
	if m := f.connsLater[len(f.connsLater)-1]; m > 64 {
		t.Errorf("a node holds %d connections 2 simulated minutes after the offers, past the high-water mark of 64", m)
	}
}

// drawRows is draw d (1, 2, ...) of n rows from the PlanetLab matrix's
// rows the tests' own swarms do not use (200 to 489): draw 1 is the
// first n of them in order, each later draw a seeded random n of them.
// With 290 such rows, two 200-row draws cannot be disjoint.
func drawRows(t testing.TB, d, n int) p2ptest.Matrix {
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	rows := takeRows(m, 200, len(m))
	if d > 1 {
		mrand.New(mrand.NewPCG(uint64(d), 0)).Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	}
	if len(rows) < n {
		t.Fatalf("%d rows past the tests' own, want %d", len(rows), n)
	}
	return m.Rows(rows[:n])
}

// measureChurn forms a bounded swarm of n nodes on the tests' rows (with
// the daemon's intervals, as measureSwarm), lets it settle, then takes
// 30% of its nodes out at once (p2ptest.Swarm.Leave: no goodbye) and
// starts as many new ones, which bootstrap from node 0 on rows of their
// own. It logs, in simulated time from that moment: when an offer
// published from a random node (one a second, or 5 s after the last
// where that one did not reach every node within 5 s; the new nodes among
// the publishers) first reached every node, and three in a row did; and when
// every node but the bootstrap again held between the connection
// manager's low and high marks (32 and 64), the new ones included.
func measureChurn(t *testing.T, n int) {
	const ping, find, low, high = 30 * time.Second, time.Minute, 32, 64
	k := n * 3 / 10
	lat := planetLabRows(t, 0, 200)
	if n+k > len(lat) {
		lat = lat.Expand(n+k, 0.1, 7)
	}
	s := p2ptest.NewMocknet(t, n, p2ptest.WithLatency(lat, 0), p2ptest.WithLazyLinks(),
		p2ptest.WithBounds(low, high, 20*time.Second), p2ptest.WithIntervals(find, 15*find), p2ptest.WithLocality(ping, 8, 8))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(1, n/200))*60*time.Minute)
	defer cancel()
	if err := waitBounded(ctx, s, high); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitMeshOf(ctx, 1, p2p.TopicOffers); err != nil { // joined, as measureSwarmOn's bounded swarms
		t.Fatal(err)
	}
	time.Sleep(2 * time.Minute) // settled: lookups every 15 minutes, pings one round in four
	rnd := mrand.New(mrand.NewPCG(uint64(n), 33))
	for range k {
		if err := s.Leave(1 + rnd.IntN(len(s.Nodes)-1)); err != nil {
			t.Fatal(err)
		}
	}
	for range k {
		if _, err := s.Join(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	const notYet = -1
	firstAll, threeAll, bounded := time.Duration(notYet), time.Duration(notYet), time.Duration(notYet)
	var runFrom, firstTook time.Duration
	inRow := 0
	for firstAll == notYet || threeAll == notYet || bounded == notYet {
		if time.Since(start) > 30*time.Minute {
			t.Fatalf("30 simulated minutes after the churn: an offer first reached every node at %v, three in a row at %v, connections within %d..%d at %v (-1ns: not yet)",
				firstAll, threeAll, low, high, bounded)
		}
		if bounded == notYet {
			conns, _, _ := connStats(s)
			if conns[0] >= low && conns[len(conns)-1] <= high {
				bounded = time.Since(start)
			}
		}
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		sent := time.Since(start)
		delays, err := s.Deliver(dctx, p2p.TopicOffers, []int{rnd.IntN(len(s.Nodes))}, 0)
		dcancel()
		if err != nil {
			inRow = 0
		} else {
			if inRow++; inRow == 1 {
				runFrom = sent
			}
			if firstAll == notYet {
				firstAll, firstTook = sent, slices.Max(delays)
			}
			if inRow == 3 && threeAll == notYet {
				threeAll = runFrom
			}
		}
		time.Sleep(time.Until(start.Add(sent + time.Second)))
	}
	conns, _, _ := connStats(s)
	t.Logf("%d nodes, %d left at once and %d joined: the first offer to reach every node was published %v later and took %v to reach the last; three in a row from %v; every node within %d..%d connections %v later (now min %d, median %d, max %d)",
		n, k, k, firstAll.Round(time.Second), firstTook.Round(time.Millisecond), threeAll.Round(time.Second), low, high, bounded.Round(time.Second), conns[0], conns[len(conns)/2], conns[len(conns)-1])
}
