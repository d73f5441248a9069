package market

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

// A query that does not parse says where, and what is allowed.
func TestParseQueryNamesThePosition(t *testing.T) {
	for _, tc := range []struct {
		q    string
		pos  int
		want string
	}{
		{"num_gpu>=2", 1, `unknown field "num_gpu"; did you mean "num_gpus"?`},
		{"num_gpus>=2 cuda>=x", 19, `version "x"`},
		{"num_gpus>=2  nonsense", 14, "want FIELD OP VALUE"},
		{"reliability>", 13, "no value after >"},
		{"country>DE", 8, "country compares by = or != only"},
		{"gpu_ram=48..24", 9, "want LO..HI with LO at most HI"},
		{"gpu_ram>=4..8", 8, "a range LO..HI takes ="},
		{"static_ip=maybe", 11, "static_ip is true or false"},
		{"price<=0.5<1", 8, "holds an operator"},
		{"down_mbps>fast", 11, `down_mbps "fast": want a number`},
		{"price~3", 1, "want FIELD OP VALUE"},
		{"pcie_ew>=4", 1, `did you mean "pcie_bw"?`},
		{"country=D\rE", 11, "want FIELD OP VALUE"},
		{strings.Repeat("num_gpus>=1 ", 33), 385, "more than 32 terms"},
		{strings.Repeat("x", MaxQueryLen+1), MaxQueryLen + 1, "at most 1024"},
	} {
		_, err := ParseQuery(tc.q)
		var qe *QueryError
		if !errors.As(err, &qe) || qe.Pos != tc.pos || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseQuery(%.40q) = %v; want position %d and %q", tc.q, err, tc.pos, tc.want)
		}
	}
	q, err := ParseQuery("  num_gpus>=2   down_mbps>500 cuda>=12.4 reliability>0.95 gpu_ram=24..48 country!=us static_ip=true driver>=550.54")
	if err != nil || len(q.terms) != 8 || q.String() != "num_gpus>=2 down_mbps>500 cuda>=12.4 reliability>0.95 gpu_ram=24..48 country!=us static_ip=true driver>=550.54" {
		t.Errorf("a good query: %+v, %v", q, err)
	}
}

// A query selects, of the offers the bid's terms let through, exactly
// those whose fields it holds; Explain counts the others under "where";
// a sort orders candidates by a field.
func TestQuerySelectsByEveryKindOfField(t *testing.T) {
	b := NewBook()
	peers := benchPeers(8, 2718)
	offer := func(i int, mod func(o *pb.Offer, g *pb.GPUGroup)) {
		o := mtOffer(peers[i], "q"+strconv.Itoa(i))
		o.Gpus[0].CudaVersion, o.Gpus[0].DriverVersion, o.Gpus[0].PcieGeneration, o.Gpus[0].PcieLanes = 1204, "550.54.15", 4, 16
		o.Gpus[0].MemoryBandwidthGbps, o.Gpus[0].Fp32Gflops = 3352, 66900
		mod(o, o.Gpus[0])
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	offer(0, func(o *pb.Offer, g *pb.GPUGroup) {})
	offer(1, func(o *pb.Offer, g *pb.GPUGroup) { g.CudaVersion, g.DriverVersion = 1180, "520.61.5" })
	offer(2, func(o *pb.Offer, g *pb.GPUGroup) { g.PcieGeneration, g.PcieLanes = 3, 8 })
	offer(3, func(o *pb.Offer, g *pb.GPUGroup) {
		o.Host.DownBitsPerSecond, o.StaticAddress, o.OpenPorts = 4e8, true, 10
	})
	offer(4, func(o *pb.Offer, g *pb.GPUGroup) { o.Region.Country, o.PriceMicros = "FR", 1_500_000 })
	offer(5, func(o *pb.Offer, g *pb.GPUGroup) { g.Count, g.Fp32Gflops, g.MemoryBandwidthGbps = 4, 0, 0 }) // says nothing of its speed
	snap := b.Snapshot()
	bid := mtBid()
	bid.Gpu.Count, bid.RegionsAllowed = 4, nil
	for _, tc := range []struct{ q, want string }{
		{"", "q0 q1 q2 q3 q4 q5"},
		{"cuda>=12.4", "q0 q2 q3 q4 q5"},
		{"driver<550", "q1"},
		{"pcie_gen>=4 pcie_lanes=16", "q0 q1 q3 q4 q5"},
		{"pcie_bw>=30", "q0 q1 q3 q4 q5"},
		{"down_mbps>500", "q0 q1 q2 q4 q5"},
		{"static_ip=true open_ports>=5", "q3"},
		{"country!=de", "q4"},
		{"price<2", "q4"},
		{"num_gpus=5..8", "q0 q1 q2 q3 q4"},
		{"tflops>=60 mem_bw>3000", "q0 q1 q2 q3 q4"},
		{"tflops!=60", "q0 q1 q2 q3 q4 q5"}, // an offer that does not say passes only !=
		{"tflops_per_usd>40", "q4"},
		{"gpu_ram=80 compute>=9 reliability>=0.5 max_hours>=24 lease_gpus=4 ram>=100 cpu_cores>=16 disk>=500 up_mbps>=1000 relay_only=false", "q0 q1 q2 q3 q4 q5"},
	} {
		q, err := ParseQuery(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		m := NewMatcher(DefaultMatchConfig(), nil, nil).WithQuery(q)
		var ids []string
		for _, c := range m.Match(snap, bid, mtNow, 0).Candidates {
			ids = append(ids, c.OfferID())
		}
		slices.Sort(ids)
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("where %q: %q, want %q", tc.q, got, tc.want)
		}
		ex := m.Explain(snap, bid, mtNow)
		if want := 6 - len(ids); ex.Feasible != len(ids) || want > 0 && (len(ex.Reasons) != 1 || ex.Reasons[0].Check != "where" || ex.Reasons[0].Count != want) {
			t.Errorf("where %q: Explain %s", tc.q, ex)
		}
		if want := scanExplain(m, snap, bid, mtNow); !equalExplanations(ex, want) {
			t.Errorf("where %q: Explain %+v, the scan's %+v", tc.q, ex, want)
		}
	}
	// GPU terms read the GPUs a lease takes: eight old H100s, not the
	// one new A100 beside them.
	mixed := NewBook()
	o := mtOffer(peers[7], "mixed")
	o.Gpus = []*pb.GPUGroup{{Model: "H100 SXM", Count: 8, VramBytes: 80 << 30, ComputeCapability: 90, CudaVersion: 1108},
		{Model: "A100 SXM 80GB", Count: 1, VramBytes: 80 << 30, ComputeCapability: 80, CudaVersion: 1204}}
	if err := mixed.PutOffer(o, mtNow); err != nil {
		t.Fatal(err)
	}
	newCUDA, _ := ParseQuery("cuda>=12.4 num_gpus>=8")
	eight := mtBid()
	eight.Gpu.Count, eight.RegionsAllowed = 8, nil
	if res := NewMatcher(DefaultMatchConfig(), nil, nil).WithQuery(newCUDA).Match(mixed.Snapshot(), eight, mtNow, 0); len(res.Candidates) != 0 {
		t.Errorf("eight H100 on CUDA 11.8 pass cuda>=12.4 by the A100 beside them: %+v", res.Candidates[0])
	}
	// Nothing fits but for the query: it is the blocker, and says why.
	q, _ := ParseQuery("cuda>=13.0")
	ex := NewMatcher(DefaultMatchConfig(), nil, nil).WithQuery(q).Explain(snap, bid, mtNow)
	if ex.Blocker == nil || ex.Blocker.Check != "where" || ex.Blocker.Fit != 6 || !strings.Contains(ex.Reasons[0].Example, "cuda>=13.0: cuda is") {
		t.Errorf("cuda>=13: %s (%+v)", ex, ex.Reasons)
	}
	// Sorting by a field, either way; offers that do not say go last.
	cs := NewMatcher(DefaultMatchConfig(), nil, nil).Match(snap, bid, mtNow, 0).Candidates
	if err := SortCandidates(cs, "tflops", true); err != nil || cs[len(cs)-1].OfferID() != "q5" {
		t.Errorf("sort by tflops: %v", err)
	}
	if err := SortCandidates(cs, "price", false); err != nil || cs[0].OfferID() != "q4" {
		t.Errorf("sort by price: first %s, %v", cs[0].OfferID(), err)
	}
	if err := SortCandidates(cs, "price", true); err != nil || cs[len(cs)-1].OfferID() != "q4" {
		t.Errorf("sort by price, falling: last %s, %v", cs[len(cs)-1].OfferID(), err)
	}
	if err := SortCandidates(cs, "colour", false); err == nil || !strings.Contains(err.Error(), "want one of num_gpus") {
		t.Errorf("sort by an unknown field: %v", err)
	}
}

// FuzzParseQuery: any text parses or fails with a position inside it
// and never panics; what parses prints a query that parses the same.
//
//	go test ./market -run '^$' -fuzz FuzzParseQuery -fuzztime 60s -fuzzminimizetime 2s
//
// (the engine minimises each new input for up to a minute by default,
// reporting no executions meanwhile.)
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"num_gpus>=2 down_mbps>500 cuda>=12.4 reliability>0.95", "gpu_ram=24..48", "country!=US static_ip=true",
		"driver>=550.54.15", "price<=0.5<1", "x", "=", "..", "cuda=12..13", "tflops_per_usd>1e3", "num_gpus>=-0", "rtt_ms<1e309", "country=D\rE", "cuda>=12\u00a0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery(s)
		if err != nil {
			var qe *QueryError
			if !errors.As(err, &qe) || qe.Pos < 1 || qe.Pos > len(s)+1 {
				t.Fatalf("ParseQuery(%q): %v: want a position within it", s, err)
			}
			return
		}
		again, err := ParseQuery(q.String())
		if err != nil || len(again.terms) != len(q.terms) {
			t.Fatalf("ParseQuery(%q) = %q, which parses to %d terms, %v", s, q.String(), len(again.terms), err)
		}
		for i := range q.terms {
			a, b := q.terms[i], again.terms[i]
			if a.f != b.f || a.op != b.op || a.lo != b.lo && !(a.lo != a.lo) || a.hi != b.hi || a.str != b.str {
				t.Fatalf("ParseQuery(%q): term %d %+v, then %+v", s, i, a, b)
			}
		}
	})
}
