package market

import (
	"math"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

func TestValidateDatasetsNamesTheFieldAtFault(t *testing.T) {
	const c = "bafybeiavfgpytvzxpw7siks2wh7rrh4ksdt2krdyuxu22yieuchlvbvr54"
	good := func() *pb.DatasetMount { return &pb.DatasetMount{Cid: c, Bytes: 1 << 20, Path: "/data"} }
	if err := ValidateDatasets([]*pb.DatasetMount{good(), {Cid: c, Bytes: 1, Path: "/models/llama"}}); err != nil {
		t.Fatalf("two good datasets: %v", err)
	}
	many := make([]*pb.DatasetMount, MaxDatasets+1)
	for i := range many {
		many[i] = good()
		many[i].Path = "/d" + strings.Repeat("x", i)
	}
	cases := []struct {
		name string
		dss  []*pb.DatasetMount
		want string
	}{
		{"too many", many, "workload.datasets: 9; at most 8"},
		{"a CIDv0", []*pb.DatasetMount{{Cid: "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG", Bytes: 1, Path: "/data"}}, "workload.datasets[0].cid"},
		{"no CID", []*pb.DatasetMount{{Cid: "nope", Bytes: 1, Path: "/data"}}, "workload.datasets[0].cid"},
		{"no bytes", []*pb.DatasetMount{{Cid: c, Path: "/data"}}, "workload.datasets[0].bytes"},
		{"too many bytes", []*pb.DatasetMount{{Cid: c, Bytes: MaxDatasetBytes + 1, Path: "/data"}}, "workload.datasets[0].bytes"},
		{"relative", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "data"}}, "workload.datasets[0].path"},
		{"unclean", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/data/../etc"}}, "workload.datasets[0].path"},
		{"root", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/"}}, "workload.datasets[0].path"},
		{"in the workspace", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/workspace/data"}}, "is in /workspace"},
		{"over the system", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/usr/lib"}}, "is in /usr"},
		{"over /proc", []*pb.DatasetMount{{Cid: c, Bytes: 1, Path: "/proc"}}, "is in /proc"},
		{"inside another", []*pb.DatasetMount{good(), {Cid: c, Bytes: 1, Path: "/data/more"}}, "overlaps workload.datasets[0].path"},
		{"twice", []*pb.DatasetMount{good(), good()}, "overlaps"},
	}
	for _, tc := range cases {
		err := ValidateDatasets(tc.dss)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestAProviderThatHoldsTheDataRanksFirstAtEqualPrice(t *testing.T) {
	const weights, corpus = "bafybeiavfgpytvzxpw7siks2wh7rrh4ksdt2krdyuxu22yieuchlvbvr54", "bafybeid4bdg7otyzkae4ew4isi3qc3pizyihrrkn3ipqoslytdle3d5c2u"
	holds := func(cs ...string) func(*pb.Offer) {
		return func(o *pb.Offer) { o.Datasets, o.Host.DownBitsPerSecond = cs, 1e9 }
	}
	// o0 holds nothing, o1 the weights, o2 both; all at 2 USD, 1 Gbit/s.
	b := mtBook(t, holds(), holds(weights), holds(corpus, weights))
	bid := mtBid()
	bid.Datasets = []*pb.DatasetNeed{{Cid: weights, Bytes: 38e9}, {Cid: corpus, Bytes: 2e9}}
	if err := DefaultLimits().ValidateBid(bid, mtNow); err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	for _, k := range []int{0, 2} {
		res := m.Match(b.Snapshot(), bid, mtNow, k)
		want := "o2 o1 o0"[:2+3*(len(res.Candidates)-1)]
		if got := candidateIDs(res.Candidates); got != want {
			t.Fatalf("k %d: ranking %q, want %q", k, got, want)
		}
		if k == 0 {
			// 40 GB at 1 Gbit/s is 320 s of the 4 h lease; 2 GB 16 s.
			c0, c1, c2 := res.Candidates[2], res.Candidates[1], res.Candidates[0]
			if c2.EffectivePriceMicros != res.Candidates[0].EffectivePriceMicros || c2.Staging.Missing != 0 || c2.Staging.Seconds != 0 {
				t.Errorf("the provider holding both: %+v", c2.Staging)
			}
			base := c2.EffectivePriceMicros
			if got, want := c1.EffectivePriceMicros-base, 2e6*16/(4*3600); math.Abs(got-want) > 1e-6 {
				t.Errorf("staging 2 GB adds %.3f micros, want %.3f", got, want)
			}
			if got, want := c0.EffectivePriceMicros-base, 2e6*320/(4*3600); math.Abs(got-want) > 1e-6 {
				t.Errorf("staging 40 GB adds %.3f micros, want %.3f", got, want)
			}
			if got, want := c1.Staging.String(), "holds 38 GB of 40 GB; stages 2 GB in ~16s"; got != want {
				t.Errorf("staging says %q, want %q", got, want)
			}
			if got, want := c2.Staging.String(), "holds all 40 GB of its datasets"; got != want {
				t.Errorf("staging says %q, want %q", got, want)
			}
		}
	}
	// With no datasets asked, holding them changes nothing.
	res := m.Match(b.Snapshot(), mtBid(), mtNow, 0)
	for _, c := range res.Candidates[1:] {
		if c.EffectivePriceMicros != res.Candidates[0].EffectivePriceMicros || c.Staging.String() != "" {
			t.Errorf("a bid with no datasets: %s at %f (%q)", c.OfferID(), c.EffectivePriceMicros, c.Staging)
		}
	}
}

func TestOffersAndBidsBoundTheirDatasets(t *testing.T) {
	const c = "bafybeiavfgpytvzxpw7siks2wh7rrh4ksdt2krdyuxu22yieuchlvbvr54"
	o := mtOffer(mtPeers[0], "o")
	o.Datasets = make([]string, MaxOfferDatasets+1)
	for i := range o.Datasets {
		o.Datasets[i] = c
	}
	if err := DefaultLimits().ValidateOffer(o, mtNow); err == nil || !strings.Contains(err.Error(), "datasets: 65; at most 64") {
		t.Errorf("an offer of 65 datasets: %v", err)
	}
	o.Datasets = []string{c, "Qm" + strings.Repeat("x", 200)}
	if err := DefaultLimits().ValidateOffer(o, mtNow); err == nil || !strings.Contains(err.Error(), "datasets[1]") {
		t.Errorf("an offer naming no CID: %v", err)
	}
	b := mtBid()
	b.Datasets = []*pb.DatasetNeed{{Cid: c, Bytes: 0}}
	if err := DefaultLimits().ValidateBid(b, mtNow); err == nil || !strings.Contains(err.Error(), "datasets[0].bytes") {
		t.Errorf("a bid's dataset of 0 bytes: %v", err)
	}
	b.Datasets = make([]*pb.DatasetNeed, MaxDatasets+1)
	for i := range b.Datasets {
		b.Datasets[i] = &pb.DatasetNeed{Cid: c, Bytes: 1}
	}
	if err := DefaultLimits().ValidateBid(b, mtNow); err == nil || !strings.Contains(err.Error(), "datasets: 9; at most 8") {
		t.Errorf("a bid of 9 datasets: %v", err)
	}
}
