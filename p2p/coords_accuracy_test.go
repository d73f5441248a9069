//go:build !race

package p2p_test

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

// This file measures accuracy against real time on 60 and 200 mocknet
// nodes; under the race detector the machine, not the links, would set
// the RTTs. The test runs in the plain pass of the test command.

// BenchmarkCoordinatesConvergeOnPlanetLab measures how well coordinates
// converge, on mocknet with real latencies, against the accuracy Vivaldi
// is known for (Dabek et al. 2004: a median relative error of about
// 11%): 200 nodes of the PlanetLab matrix, each sampling 4 peers at a
// time through its Pinger and the coordinate exchange, until the median
// relative error over all pairs is within coordGoal (12%) or 120 s pass;
// and on a second slice of the matrix, rows the constants were not chosen
// on. It reports the median and p90 relative error, the seconds taken and
// the samples a node took. A simulation of this size measures the
// machine as much as the code, so it is a benchmark, run by
//
//	go test ./p2p -run '^$' -bench CoordinatesConvergeOnPlanetLab -benchtime 1x
func BenchmarkCoordinatesConvergeOnPlanetLab(b *testing.B) {
	m, err := p2ptest.PlanetLab()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		first int
	}{{"rows-0", 0}, {"rows-290", 290}} {
		b.Run(tc.name, func(b *testing.B) {
			rows := takeRows(m, tc.first, 200)
			if len(rows) < 200 {
				b.Fatalf("%d usable rows from %d", len(rows), tc.first)
			}
			for b.Loop() {
				s := newCoordSwarm(b, m, rows)
				errs, took := s.converge(3, coordGoal, 120*time.Second)
				var st p2p.CoordStats
				for _, c := range s.coords {
					cs := c.Stats()
					st.Samples, st.Outliers = st.Samples+cs.Samples, st.Outliers+cs.Outliers
				}
				med, p90 := quantile(errs, 0.5), quantile(errs, 0.9)
				b.Logf("PlanetLab rows %d..%d, %d nodes: median relative error %.3f, p90 %.3f; under %.2f after %s; %d samples (%.0f a node), %d outliers",
					rows[0], rows[len(rows)-1], len(rows), med, p90, coordGoal, took.Round(100*time.Millisecond), st.Samples, float64(st.Samples)/float64(len(rows)), st.Outliers)
				b.ReportMetric(med, "median-rel-err")
				b.ReportMetric(p90, "p90-rel-err")
				b.ReportMetric(took.Seconds(), "s-to-converge")
				b.ReportMetric(float64(st.Samples)/float64(len(rows)), "samples/node")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

// A peer that lies about its coordinate does not move honest nodes: once
// a node's own coordinate has settled, a claim wildly inconsistent with
// the RTT measured to its peer is ignored. 60 nodes, 6 of them answering
// each ask with another random coordinate, claimed with full confidence
// (a disorder attack): the honest nodes still estimate each other within
// coordGoal, and they caught the lies.
func TestALiarsCoordinateDoesNotMoveHonestNodes(t *testing.T) {
	t.Parallel()
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	rows := takeRows(m, 290, 60)
	liar := func(i int) bool { return i%10 == 3 }
	var mu sync.Mutex
	rnd := mrand.New(mrand.NewPCG(3, 4))
	s := newCoordSwarmLying(t, m, rows, func(i int) *coordinate.Coordinate {
		if !liar(i) {
			return nil
		}
		// A disorder attack: each answer somewhere else, up to half a
		// second out in each dimension, claimed with full confidence.
		mu.Lock()
		defer mu.Unlock()
		c := coordinate.NewCoordinate(coordinate.DefaultConfig())
		for d := range c.Vec {
			c.Vec[d] = rnd.Float64() - 0.5
		}
		c.Error = 0.01
		return c
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	wg := s.sample(ctx, 3)
	honest := func(i int) bool { return !liar(i) }
	var errs []float64
	look := time.NewTicker(time.Second)
	defer look.Stop()
	for ctx.Err() == nil {
		select {
		case <-look.C:
		case <-ctx.Done():
		}
		if errs = s.relErrorsOf(honest); quantile(errs, 0.5) <= coordGoal {
			break
		}
	}
	cancel()
	wg.Wait()
	var caught uint64
	for i, c := range s.coords {
		if honest(i) {
			caught += c.Stats().Outliers
		}
	}
	t.Logf("honest pairs: median relative error %.3f, p90 %.3f; %d lies caught", quantile(errs, 0.5), quantile(errs, 0.9), caught)
	if med := quantile(errs, 0.5); med > coordGoal {
		t.Errorf("honest pairs: median relative error %.3f with liars about, want at most %.2f", med, coordGoal)
	}
	if caught == 0 {
		t.Error("no lie was caught")
	}
}
