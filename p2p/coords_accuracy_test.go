//go:build !race

package p2p_test

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

// This file's test measures accuracy against real time on 200 mocknet
// nodes; under the race detector the machine, not the links, would set
// the RTTs. It runs in the plain pass of the test command.

// Coordinates converge, on mocknet with real latencies, to estimates
// within the accuracy Vivaldi is known for (Dabek et al. 2004: a median
// relative error of about 11%): 200 nodes of the PlanetLab matrix, each
// sampling 4 peers at a time through its Pinger and the coordinate
// exchange, the median relative error over all pairs at most 12%; and on
// a second slice of the matrix, rows the constants were not chosen on.
func TestCoordinatesConvergeOnPlanetLab(t *testing.T) {
	t.Parallel()
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		first int
	}{{"rows-0", 0}, {"rows-290", 290}} {
		t.Run(tc.name, func(t *testing.T) { // one at a time: each loads the machine enough
			rows := takeRows(m, tc.first, 200)
			if len(rows) < 200 {
				t.Fatalf("%d usable rows from %d", len(rows), tc.first)
			}
			s := newCoordSwarm(t, m, rows)
			errs, took := s.converge(3, coordGoal, 120*time.Second)
			var st p2p.CoordStats
			for _, c := range s.coords {
				cs := c.Stats()
				st.Samples, st.Outliers = st.Samples+cs.Samples, st.Outliers+cs.Outliers
			}
			med, p90 := quantile(errs, 0.5), quantile(errs, 0.9)
			t.Logf("PlanetLab rows %d..%d, %d nodes: median relative error %.3f, p90 %.3f; under %.2f after %s; %d samples (%.0f a node), %d outliers",
				rows[0], rows[len(rows)-1], len(rows), med, p90, coordGoal, took.Round(100*time.Millisecond), st.Samples, float64(st.Samples)/float64(len(rows)), st.Outliers)
			if med > coordGoal {
				t.Errorf("median relative error %.3f, want at most %.2f", med, coordGoal)
			}
		})
	}
}
