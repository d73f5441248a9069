//go:build !race

package p2p_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

var scaleSizes = flag.String("scale", "", "swarm sizes TestSimulatedSwarmFigures measures, comma-separated (e.g. 200,500,1000); empty: 80 nodes")

// A bounded swarm measured in simulated time (p2ptest.Simulate) with the
// daemon's intervals, as BenchmarkBoundedSwarm measures it in real time:
// formed and settled, each node's traffic over a 2-minute window, 20
// offers from 20 nodes, connections. The figures are the protocol's on
// the matrix's links, whatever else the machine runs. By default one
// swarm of 80 nodes (more than a node's 64 connections), whose every
// offer must reach every node and whose nodes must be back within their
// bounds 2 simulated minutes later; -scale 200,500,1000 measures those
// sizes instead and logs a row each:
//
//	go test ./p2p -run TestSimulatedSwarmFigures -scale 200 -v -timeout 60m
func TestSimulatedSwarmFigures(t *testing.T) {
	sizes := []int{80}
	if *scaleSizes != "" {
		sizes = nil
		for f := range strings.SplitSeq(*scaleSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				t.Fatalf("-scale %q: %q is not a swarm size (2 or more nodes)", *scaleSizes, f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var f swarmFigures
			var took time.Duration
			p2ptest.Simulate(t, func(t *testing.T) {
				start := time.Now()
				f = measureSwarm(t, n, true)
				took = time.Since(start)
			})
			t.Logf("simulated %d nodes for %v: %.1f KB/node/min (+%.1f amortized), offers p50 %v p99 %v, connections median %d max %d (later %d), RSS %.1f MB/node",
				n, took.Round(time.Second), f.bytesPerMin/1e3, f.amortized/1e3, f.p50, f.p99,
				f.conns[len(f.conns)/2], f.conns[len(f.conns)-1], f.connsLater[len(f.connsLater)-1], f.rssPerNode/1e6)
			if m := f.connsLater[len(f.connsLater)-1]; m > 64 {
				t.Errorf("a node holds %d connections 2 simulated minutes after the offers, past the high-water mark of 64", m)
			}
		})
	}
}
