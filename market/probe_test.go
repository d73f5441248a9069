package market

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

// TestClassTable: common classes have bits from the start, others get
// the next ones until 16 are given, and a bit never changes; a class
// past them has none, and a set naming it says so.
func TestClassTable(t *testing.T) {
	tab := newClassTable("training", "inference")
	if tab.bit("training") != 1 || tab.bit("inference") != 2 || tab.bit("batch") != 0 {
		t.Fatalf("common bits: %d %d %d", tab.bit("training"), tab.bit("inference"), tab.bit("batch"))
	}
	bits, ok := tab.set([]string{"inference", "batch"})
	if !ok || bits != 2|4 || tab.bit("batch") != 4 {
		t.Fatalf("set: %b %v", bits, ok)
	}
	for i := range 13 {
		if _, ok := tab.set([]string{"c" + strconv.Itoa(i)}); !ok {
			t.Fatalf("class %d of 16 refused", i+4)
		}
	}
	if _, ok := tab.set([]string{"training", "one-too-many"}); ok || tab.bit("one-too-many") != 0 {
		t.Fatal("a 17th class got a bit")
	}
	if tab.bit("batch") != 4 || tab.bit("c12") != 1<<15 {
		t.Fatalf("bits changed: batch %d, c12 %d", tab.bit("batch"), tab.bit("c12"))
	}
}

// TestProbeChunksFollowChurn fills one bucket well past a chunk, then
// replaces, withdraws and adds offers in rounds, a snapshot after each:
// the bucket's chunks stay in key order, none empty or past twice
// chunkProbes, holding one probe per offer; chunks no change touched are
// shared with the last view; and Explain's counts stay the scan's.
func TestProbeChunksFollowChurn(t *testing.T) {
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	peers := benchPeers(300, 7)
	b := NewBook()
	live := map[string]bool{}
	seq := uint64(1)
	put := func(id string, withdraw bool) {
		i, _ := strconv.Atoi(id[1:])
		o := mtOffer(peers[i%len(peers)], id) // an ID keeps its issuer
		seq++
		o.Header.Seq = seq
		o.PriceMicros = uint64(1+r.IntN(40)) * 100_000
		o.Host.CpuCores = uint32(8 << r.IntN(4))
		o.Withdrawn = withdraw
		if r.IntN(10) == 0 { // a pair: a second group of another model
			o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: "A100", Count: 2, VramBytes: 40 << 30, ComputeCapability: 80})
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
		live[id] = !withdraw
	}
	for i := range 1500 {
		put("o"+strconv.Itoa(i), false)
	}
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	bids := []*pb.Bid{mtBid(), mtBid()}
	bids[1].MaxPriceMicros, bids[1].HostMin.CpuCores = 1_500_000, 32
	var last *bucketView
	shared := 0
	for round := range 40 {
		for range 1 + r.IntN(6) {
			id := "o" + strconv.Itoa(r.IntN(2000))
			put(id, live[id] && r.IntN(3) == 0)
		}
		s := b.Snapshot()
		v := s.byModel["H100"][0]
		n := 0
		for i, c := range v.chunks {
			if len(c.probes) == 0 || len(c.probes) > 2*chunkProbes {
				t.Fatalf("round %d: chunk %d holds %d probes", round, i, len(c.probes))
			}
			for j := range c.probes {
				if j > 0 && compareProbes(c.probes[j-1], c.probes[j]) >= 0 || i > 0 && j == 0 && compareProbes(v.chunks[i-1].probes[len(v.chunks[i-1].probes)-1], c.probes[0]) >= 0 {
					t.Fatalf("round %d: chunk %d out of key order at %d", round, i, j)
				}
			}
			n += len(c.probes)
			if last != nil && slices.Contains(last.chunks, c) {
				shared++
			}
		}
		if n != v.n {
			t.Fatalf("round %d: %d probes for %d offers", round, n, v.n)
		}
		for _, bid := range bids {
			if got, want := m.Explain(s, bid, mtNow), scanExplain(m, s, bid, mtNow); !equalExplanations(got, want) {
				t.Fatalf("round %d: Explain:\n%+v\nthe scan's:\n%+v", round, got, want)
			}
		}
		last = v
	}
	if shared == 0 {
		t.Error("no chunk was shared with the view before: every rebuild copied the bucket")
	}
}
