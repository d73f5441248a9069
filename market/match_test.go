package market

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// mtNow is the clock of the matcher tests: Monday 2 March 2026, noon UTC.
var mtNow = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

var mtPeers = benchPeers(8, 1234)

// mtOffer is a valid offer that fits mtBid: eight H100 in Germany, silver
// at 2 USD, gold at 3, always available.
func mtOffer(issuer peer.ID, id string) *pb.Offer {
	return &pb.Offer{
		Header: &pb.Header{Version: Version, Issuer: []byte(issuer), Id: id, Seq: 1,
			CreatedUnixMs: mtNow.Add(-time.Minute).UnixMilli(), ExpiresUnixMs: mtNow.Add(time.Hour).UnixMilli()},
		Gpus:                []*pb.GPUGroup{{Model: "H100", Count: 8, VramBytes: 80 << 30, ComputeCapability: 90, Interconnect: "sxm"}},
		Host:                &pb.HostSpec{CpuCores: 64, RamBytes: 512 << 30, DiskBytes: 2000 << 30, UpBitsPerSecond: 1e10, DownBitsPerSecond: 1e10},
		Region:              &pb.Region{Country: "DE", Label: "fra"},
		Currency:            "USD",
		PriceMicros:         2_000_000,
		TierPrices:          []*pb.TierPrice{{Tier: pb.Tier_TIER_GOLD, MicrosPerGpuHour: 3_000_000}, {Tier: pb.Tier_TIER_BRONZE, MicrosPerGpuHour: 1_000_000}},
		MinDurationSeconds:  3600,
		MaxDurationSeconds:  72 * 3600,
		Tiers:               []pb.Tier{pb.Tier_TIER_GOLD, pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE},
		BronzeNoticeSeconds: 600,
	}
}

// mtBid wants eight GPUs of 40 GiB and compute 8.0 for four hours, silver,
// at most 2.5 USD per GPU-hour.
func mtBid() *pb.Bid {
	return &pb.Bid{
		Header: &pb.Header{Version: Version, Issuer: []byte(mtPeers[7]), Id: "bid", Seq: 1,
			CreatedUnixMs: mtNow.UnixMilli(), ExpiresUnixMs: mtNow.Add(time.Hour).UnixMilli()},
		Gpu:                 &pb.GPURequirement{Models: []string{"H100", "A100"}, MinVramBytes: 40 << 30, MinComputeCapability: 80, Count: 8},
		HostMin:             &pb.HostSpec{CpuCores: 16, RamBytes: 128 << 30},
		Tier:                pb.Tier_TIER_SILVER,
		Currency:            "USD",
		MaxPriceMicros:      2_500_000,
		DurationSeconds:     4 * 3600,
		EarliestStartUnixMs: mtNow.UnixMilli(),
		WorkloadClass:       "training",
		Image:               "docker.io/pytorch/pytorch:2.5",
	}
}

// mtSources are fixed reliabilities, RTTs measured and RTTs estimated; a
// peer not listed is fully reliable and of unknown RTT.
type mtSources struct {
	rel map[peer.ID]float64
	rtt map[peer.ID]time.Duration
	est map[peer.ID]time.Duration
	// implausible: why a peer's claimed region cannot be true
	implausible map[peer.ID]string
}

func (s mtSources) Implausible(issuer peer.ID, _ string) string { return s.implausible[issuer] }

func (s mtSources) EstimateRTT(issuer peer.ID, _ *pb.NetworkCoordinate) (time.Duration, bool) {
	d, ok := s.est[issuer]
	return d, ok
}

func (s mtSources) Reliability(p peer.ID) float64 {
	if v, ok := s.rel[p]; ok {
		return v
	}
	return 1
}

func (s mtSources) RTT(p peer.ID) (time.Duration, bool) {
	d, ok := s.rtt[p]
	return d, ok
}

func (s mtSources) WorstRTT() time.Duration {
	var w time.Duration
	for _, d := range s.rtt {
		w = max(w, d)
	}
	return w
}

type mtExcluded map[peer.ID]bool

func (x mtExcluded) Excluded(p peer.ID) bool { return x[p] }

// at returns mtNow's Monday plus a day and an hour of the week.
func at(day, hour int) time.Time {
	return mtNow.Add(time.Duration(day*24+hour-12) * time.Hour)
}

func TestTestFixturesAreValid(t *testing.T) {
	if err := DefaultLimits().ValidateOffer(mtOffer(mtPeers[0], "o"), mtNow); err != nil {
		t.Errorf("mtOffer: %v", err)
	}
	if err := DefaultLimits().ValidateBid(mtBid(), mtNow); err != nil {
		t.Errorf("mtBid: %v", err)
	}
	if err := DefaultLimits().ValidateBid(benchBid(mtPeers[0], benchNow), benchNow); err != nil {
		t.Errorf("benchBid: %v", err)
	}
}

// checkCase is one row of the check table: how the offer, bid and sources
// differ from the fitting defaults, and which check must fail (none if
// empty), with words its detail must contain.
type checkCase struct {
	name   string
	offer  func(*pb.Offer)
	bid    func(*pb.Bid)
	src    mtSources
	excl   mtExcluded
	check  string
	detail string
	verify func(t *testing.T, c Candidate)
}

func runCheckCases(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, bid := mtOffer(mtPeers[0], "o1"), mtBid()
			if tc.offer != nil {
				tc.offer(o)
			}
			if tc.bid != nil {
				tc.bid(bid)
			}
			m := NewMatcher(DefaultMatchConfig(), tc.src, tc.src).WithExcluder(tc.excl)
			c, why := m.Feasible(o, bid, mtNow)
			switch {
			case tc.check == "" && why != nil:
				t.Fatalf("want feasible, got %v", why)
			case tc.check != "" && why == nil:
				t.Fatalf("want check %q to fail, got feasible %+v", tc.check, c)
			case tc.check != "" && (why.Check != tc.check || !strings.Contains(why.Detail, tc.detail)):
				t.Fatalf("got %s: %q (kind %q), want %s: …%s…", why.Check, why.Detail, why.Kind, tc.check, tc.detail)
			}
			if tc.verify != nil {
				tc.verify(t, c)
			}
			// The indexed path agrees with the check, when the book holds the offer.
			b := NewBook()
			if o.GetWithdrawn() || o.Header.ExpiresUnixMs <= mtNow.UnixMilli() {
				return
			}
			if err := b.PutOffer(o, mtNow); err != nil {
				t.Fatal(err)
			}
			if res := m.Match(b.Snapshot(), bid, mtNow, 5); (len(res.Candidates) == 1) != (tc.check == "") {
				t.Errorf("Match returned %d candidates; Feasible said %v", len(res.Candidates), why)
			}
		})
	}
}

func TestChecksBasics(t *testing.T) {
	runCheckCases(t, []checkCase{
		{name: "fits", verify: func(t *testing.T, c Candidate) {
			if c.GPUs != 8 || c.PriceMicros != 2_000_000 || !c.Start.Equal(mtNow) || c.TotalMicros != 64_000_000 {
				t.Errorf("candidate %+v", c)
			}
		}},
		{name: "a start further ahead than the offer books", bid: func(b *pb.Bid) { b.EarliestStartUnixMs = mtNow.Add(200 * time.Hour).UnixMilli() }, check: "window", detail: "more than 168h0m0s ahead"},
		{name: "an offer that books further ahead", offer: func(o *pb.Offer) { o.MaxStartAheadSeconds = 300 * 3600 }, bid: func(b *pb.Bid) { b.EarliestStartUnixMs = mtNow.Add(200 * time.Hour).UnixMilli() }},
		{name: "withdrawn", offer: func(o *pb.Offer) { o.Withdrawn = true }, check: "live", detail: "withdrawn"},
		{name: "expired", offer: func(o *pb.Offer) { o.Header.ExpiresUnixMs = mtNow.UnixMilli() }, check: "live", detail: "expired at"},
		{name: "excluded", excl: mtExcluded{mtPeers[0]: true}, check: "excluded", detail: "excluded"},
		{name: "other currency", offer: func(o *pb.Offer) { o.Currency = "EUR" }, check: "currency", detail: "currency EUR, bid pays USD"},
		{name: "tier not offered", offer: func(o *pb.Offer) { o.Tiers = []pb.Tier{pb.Tier_TIER_GOLD} }, check: "tier", detail: "silver"},
		{name: "bronze without preemption_ok", bid: func(b *pb.Bid) { b.Tier = pb.Tier_TIER_BRONZE }, check: "preemption", detail: "preemption_ok"},
		{name: "bronze with preemption_ok", bid: func(b *pb.Bid) { b.Tier, b.PreemptionOk = pb.Tier_TIER_BRONZE, true },
			verify: func(t *testing.T, c Candidate) {
				if c.PriceMicros != 1_000_000 {
					t.Errorf("bronze price %d, want the tier price 1000000", c.PriceMicros)
				}
			}},
		{name: "base price above max", offer: func(o *pb.Offer) { o.PriceMicros = 2_600_000 }, check: "price", detail: "silver 2.6/GPU-h > 2.5 max"},
		{name: "tier price overrides a dear base price", offer: func(o *pb.Offer) {
			o.PriceMicros = 9_000_000
			o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: pb.Tier_TIER_SILVER, MicrosPerGpuHour: 2_400_000})
		}},
		{name: "tier price overrides a cheap base price", offer: func(o *pb.Offer) {
			o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: pb.Tier_TIER_SILVER, MicrosPerGpuHour: 2_700_000})
		}, check: "price", detail: "2.7"},
		{name: "gold price for a gold bid", bid: func(b *pb.Bid) { b.Tier = pb.Tier_TIER_GOLD }, check: "price", detail: "gold 3/GPU-h > 2.5 max"},
		{name: "region not allowed", bid: func(b *pb.Bid) { b.RegionsAllowed = []string{"FR", "NL"} }, check: "region", detail: "country DE not in [FR NL]"},
		{name: "region allowed", bid: func(b *pb.Bid) { b.RegionsAllowed = []string{"FR", "DE"} }},
		{name: "region denied", bid: func(b *pb.Bid) { b.RegionsDenied = []string{"DE"} }, check: "region", detail: "country DE denied"},
		{name: "region implausible", src: mtSources{implausible: map[peer.ID]string{mtPeers[0]: "measured 3ms from US"}}, bid: func(b *pb.Bid) { b.RegionsAllowed = []string{"DE"} },
			check: "claim", detail: "country DE implausible: measured 3ms from US"},
		// What the offer is is said before what it costs: no A100 here,
		// not "too dear" nor "not in FR".
		{name: "a model the offer lacks, in another region, too dear", offer: func(o *pb.Offer) { o.PriceMicros = 2_600_000 },
			bid: func(b *pb.Bid) { b.Gpu.Models, b.RegionsAllowed = []string{"A100"}, []string{"FR"} }, check: "model", detail: "models H100; bid wants A100"},
		{name: "in another region and too dear", offer: func(o *pb.Offer) { o.PriceMicros = 2_600_000 },
			bid: func(b *pb.Bid) { b.RegionsAllowed = []string{"FR"} }, check: "region", detail: "country DE not in [FR]"},
		{name: "region implausible, no region asked", src: mtSources{implausible: map[peer.ID]string{mtPeers[0]: "measured 3ms from US"}}},
	})
}

func TestChecksGPUs(t *testing.T) {
	runCheckCases(t, []checkCase{
		{name: "model not wanted", bid: func(b *pb.Bid) { b.Gpu.Models = []string{"A100"} }, check: "model", detail: "models H100; bid wants A100"},
		{name: "any model", bid: func(b *pb.Bid) { b.Gpu.Models = nil }},
		{name: "vram below", offer: func(o *pb.Offer) { o.Gpus[0].VramBytes = 24 << 30 }, check: "vram", detail: "vram 24 GB < 40 GB required"},
		{name: "compute below", bid: func(b *pb.Bid) { b.Gpu.MinComputeCapability = 100 }, check: "compute", detail: "compute capability 9.0 < 10.0 required"},
		{name: "too few GPUs", offer: func(o *pb.Offer) { o.Gpus[0].Count = 4 }, check: "gpus", detail: "4 GPUs < 8 per provider required"},
		{name: "fewer GPUs accepted by min_per_provider", offer: func(o *pb.Offer) { o.Gpus[0].Count = 4 }, bid: func(b *pb.Bid) { b.Gpu.MinPerProvider = 2 },
			verify: func(t *testing.T, c Candidate) {
				if c.GPUs != 4 || c.TotalMicros != 32_000_000 {
					t.Errorf("GPUs %d, total %d; want 4 and 32000000", c.GPUs, c.TotalMicros)
				}
			}},
		{name: "more GPUs than asked", bid: func(b *pb.Bid) { b.Gpu.Count = 2 }, verify: func(t *testing.T, c Candidate) {
			if c.GPUs != 2 {
				t.Errorf("GPUs %d, want 2", c.GPUs)
			}
		}},
		{name: "groups of one model add up", offer: func(o *pb.Offer) {
			o.Gpus[0].Count = 4
			o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: "H100", Count: 4, VramBytes: 80 << 30, ComputeCapability: 90})
		}},
		{name: "groups of two models do not", offer: func(o *pb.Offer) {
			o.Gpus[0].Count = 4
			o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: "A100", Count: 4, VramBytes: 80 << 30, ComputeCapability: 80})
		}, check: "gpus", detail: "4 GPUs < 8"},
		{name: "a group too small does not count", offer: func(o *pb.Offer) {
			o.Gpus[0].Count = 4
			o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: "H100", Count: 4, VramBytes: 16 << 30, ComputeCapability: 90})
		}, check: "gpus", detail: "4 GPUs < 8"},
		// Bundles: an offer sold in steps, or whole.
		{name: "pairs for an even count", offer: func(o *pb.Offer) { o.GpuStep = 2 }, bid: func(b *pb.Bid) { b.Gpu.Count = 4 }, verify: func(t *testing.T, c Candidate) {
			if c.GPUs != 4 {
				t.Errorf("GPUs %d, want 4", c.GPUs)
			}
		}},
		{name: "pairs for an odd count", offer: func(o *pb.Offer) { o.GpuStep = 2 }, bid: func(b *pb.Bid) { b.Gpu.Count = 3 }, check: "bundle", detail: "sold in steps of 2 GPUs: 8 here, bid takes 3 to 3"},
		{name: "pairs for a pool member", offer: func(o *pb.Offer) { o.GpuStep, o.Gpus[0].Count = 2, 5 }, bid: func(b *pb.Bid) { b.Gpu.Count, b.Gpu.MinPerProvider = 16, 2 }, verify: func(t *testing.T, c Candidate) {
			if c.GPUs != 4 {
				t.Errorf("GPUs %d of 5 in pairs, want 4", c.GPUs)
			}
		}},
		{name: "a machine sold whole to a bid for part", offer: func(o *pb.Offer) { o.GpusWhole = true }, bid: func(b *pb.Bid) { b.Gpu.Count = 2 }, check: "bundle", detail: "sold whole: 8 GPUs, bid takes 2 to 2"},
		{name: "a machine sold whole to a bid for all", offer: func(o *pb.Offer) { o.GpusWhole = true }, bid: func(b *pb.Bid) { b.Gpu.Count = 16; b.Gpu.MinPerProvider = 8 }, verify: func(t *testing.T, c Candidate) {
			if c.GPUs != 8 {
				t.Errorf("GPUs %d, want all 8", c.GPUs)
			}
		}},
		// The catalog: names in any spelling, families, form factors,
		// NVLink and marketed memory.
		{name: "a model's NVML name, asked for by family", offer: func(o *pb.Offer) { o.Gpus[0].Model = "NVIDIA H100 80GB HBM3" }, bid: func(b *pb.Bid) { b.Gpu.Models = []string{"h100"} }},
		{name: "a catalog model, asked for by another spelling", offer: func(o *pb.Offer) { o.Gpus[0].Model = "H100 SXM" }, bid: func(b *pb.Bid) { b.Gpu.Models = []string{"h100-sxm5"} }},
		{name: "another model of the family", offer: func(o *pb.Offer) { o.Gpus[0].Model = "H100 PCIe" }, bid: func(b *pb.Bid) { b.Gpu.Models = []string{"H100 SXM"} },
			check: "model", detail: "models H100 PCIe; bid wants H100 SXM"},
		{name: "the form factor asked", offer: func(o *pb.Offer) { o.Gpus[0].Model = "H100 SXM" }, bid: func(b *pb.Bid) { b.Gpu.FormFactor = "sxm" }},
		{name: "another form factor", offer: func(o *pb.Offer) { o.Gpus[0].Model, o.Gpus[0].Interconnect = "H100 PCIe", "pcie" }, bid: func(b *pb.Bid) { b.Gpu.FormFactor = "SXM" },
			check: "model", detail: "bid wants H100, A100 (SXM)"},
		{name: "NVLink of an SXM model", offer: func(o *pb.Offer) { o.Gpus[0].Model, o.Gpus[0].Interconnect = "H100 SXM", "" }, bid: func(b *pb.Bid) { b.Gpu.Nvlink = true }},
		{name: "NVLink of a hand-listed group that says so", offer: func(o *pb.Offer) { o.Gpus[0].Interconnect = "nvlink" }, bid: func(b *pb.Bid) { b.Gpu.Nvlink = true }},
		{name: "no NVLink on PCIe", offer: func(o *pb.Offer) { o.Gpus[0].Model, o.Gpus[0].Interconnect = "H100 PCIe", "pcie" }, bid: func(b *pb.Bid) { b.Gpu.Nvlink = true },
			check: "model", detail: "(NVLink)"},
		{name: "a 24 GB card reporting 23.99 GiB has 24 GB", offer: func(o *pb.Offer) {
			o.Gpus[0] = &pb.GPUGroup{Model: "RTX4090", Count: 8, VramBytes: 24564 << 20, ComputeCapability: 89}
		}, bid: func(b *pb.Bid) { b.Gpu.Models, b.Gpu.MinVramBytes = []string{"4090"}, 24<<30 }},
		{name: "but not 25", offer: func(o *pb.Offer) {
			o.Gpus[0] = &pb.GPUGroup{Model: "RTX4090", Count: 8, VramBytes: 24564 << 20, ComputeCapability: 89}
		}, bid: func(b *pb.Bid) { b.Gpu.Models, b.Gpu.MinVramBytes = []string{"RTX 4090"}, 25<<30 }, check: "vram", detail: "vram 24 GB < 25 GB required"},
		{name: "host cores", bid: func(b *pb.Bid) { b.HostMin.CpuCores = 128 }, check: "host", detail: "64 cpu cores < 128 required"},
		// A lease of 2 GPUs of 8 gets a quarter of the host, unless the
		// provider sells it whole with any lease.
		{name: "a quarter of the host for 2 GPUs of 8", bid: func(b *pb.Bid) { b.Gpu.Count, b.HostMin.CpuCores, b.HostMin.RamBytes = 2, 16, 128<<30 }},
		{name: "more cores than 2 GPUs' share", bid: func(b *pb.Bid) { b.Gpu.Count, b.HostMin.CpuCores = 2, 17 }, check: "host", detail: "16 cpu cores (the share of 2 of 8 GPUs) < 17 required"},
		{name: "more RAM than 2 GPUs' share", bid: func(b *pb.Bid) { b.Gpu.Count, b.HostMin.RamBytes = 2, 129<<30 }, check: "host", detail: "ram 128 GiB (the share of 2 of 8 GPUs) < 129 GiB required"},
		{name: "a host sold whole", offer: func(o *pb.Offer) { o.HostWhole = true }, bid: func(b *pb.Bid) { b.Gpu.Count, b.HostMin.CpuCores = 2, 64 }},
		{name: "downlink of 2 GPUs' share", bid: func(b *pb.Bid) { b.Gpu.Count, b.HostMin.DownBitsPerSecond = 2, 5e9 }, check: "host", detail: "downlink 2500 Mbit/s (the share of 2 of 8 GPUs) < 5000 Mbit/s required"},
		{name: "host ram", bid: func(b *pb.Bid) { b.HostMin.RamBytes = 1 << 40 }, check: "host", detail: "ram 512 GiB < 1024 GiB required"},
		{name: "host disk", bid: func(b *pb.Bid) { b.HostMin.DiskBytes = 4000 << 30 }, check: "host", detail: "disk"},
		{name: "host uplink", bid: func(b *pb.Bid) { b.HostMin.UpBitsPerSecond = 1e11 }, check: "host", detail: "uplink"},
		{name: "host downlink", bid: func(b *pb.Bid) { b.HostMin.DownBitsPerSecond = 1e11 }, check: "host", detail: "downlink"},
		{name: "no host given", offer: func(o *pb.Offer) { o.Host = nil }, check: "host", detail: "0 cpu cores"},
	})
}

func TestChecksTerms(t *testing.T) {
	runCheckCases(t, []checkCase{
		{name: "duration too long", bid: func(b *pb.Bid) { b.DurationSeconds = 100 * 3600 }, check: "duration", detail: "100h0m0s not within 1h0m0s-72h0m0s"},
		{name: "duration too short", bid: func(b *pb.Bid) { b.DurationSeconds = 1800 }, check: "duration", detail: "30m0s"},
		{name: "workload class not accepted", offer: func(o *pb.Offer) { o.WorkloadClasses = []string{"inference"} }, check: "workload", detail: `"training" not in [inference]`},
		{name: "workload class accepted", offer: func(o *pb.Offer) { o.WorkloadClasses = []string{"inference", "training"} }},
		{name: "image without an allowed prefix", offer: func(o *pb.Offer) { o.ImageAllow = []string{"ghcr.io/"} }, check: "image", detail: "matches no allowed prefix"},
		{name: "image with an allowed prefix", offer: func(o *pb.Offer) { o.ImageAllow = []string{"ghcr.io/", "docker.io/pytorch/"} }},
		{name: "image denied", offer: func(o *pb.Offer) { o.ImageDeny = []string{"docker.io/pytorch"} }, check: "image", detail: `denied by prefix "docker.io/pytorch"`},
		{name: "reliability below", src: mtSources{rel: map[peer.ID]float64{mtPeers[0]: 0.9}}, bid: func(b *pb.Bid) { b.MinReliabilityPermille = 950 },
			check: "reliability", detail: "reliability 0.900 < 0.950 required"},
		{name: "reliability enough", src: mtSources{rel: map[peer.ID]float64{mtPeers[0]: 0.95}}, bid: func(b *pb.Bid) { b.MinReliabilityPermille = 950 }},
		{name: "rtt above", src: mtSources{rtt: map[peer.ID]time.Duration{mtPeers[0]: 80 * time.Millisecond}}, bid: func(b *pb.Bid) { b.MaxRttMs = 50 },
			check: "rtt", detail: "rtt 80ms measured > 50ms allowed"},
		{name: "unknown rtt fails a limit", bid: func(b *pb.Bid) { b.MaxRttMs = 50 }, check: "rtt", detail: "rtt unknown (neither measured nor estimated); 50ms allowed"},
		{name: "unknown rtt without a limit", verify: func(t *testing.T, c Candidate) {
			if c.RTTKnown || c.RTTSource != RTTUnknown || c.EffectivePriceMicros != 3_000_000 { // ranked at RTTRef: 2.0 × 1.5
				t.Errorf("unknown RTT: known %v (%s), effective price %v", c.RTTKnown, c.RTTSource, c.EffectivePriceMicros)
			}
		}},
		{name: "estimated rtt above", src: mtSources{est: map[peer.ID]time.Duration{mtPeers[0]: 70 * time.Millisecond}}, bid: func(b *pb.Bid) { b.MaxRttMs = 50 },
			check: "rtt", detail: "rtt 70ms estimated > 50ms allowed"},
		{name: "estimated rtt within", src: mtSources{est: map[peer.ID]time.Duration{mtPeers[0]: 40 * time.Millisecond}}, bid: func(b *pb.Bid) { b.MaxRttMs = 50 }, verify: func(t *testing.T, c Candidate) {
			if !c.RTTKnown || c.RTTSource != RTTEstimated || c.RTT != 40*time.Millisecond {
				t.Errorf("estimated RTT: %v known %v (%s)", c.RTT, c.RTTKnown, c.RTTSource)
			}
		}},
		{name: "measured before estimated", src: mtSources{rtt: map[peer.ID]time.Duration{mtPeers[0]: 45 * time.Millisecond}, est: map[peer.ID]time.Duration{mtPeers[0]: 10 * time.Millisecond}},
			bid: func(b *pb.Bid) { b.MaxRttMs = 50 }, verify: func(t *testing.T, c Candidate) {
				if c.RTTSource != RTTMeasured || c.RTT != 45*time.Millisecond {
					t.Errorf("measured and estimated: %v (%s), want the measured 45ms", c.RTT, c.RTTSource)
				}
			}},
	})
}

func TestChecksWindows(t *testing.T) {
	oneOff := func(ws ...*pb.Interval) func(*pb.Offer) { return func(o *pb.Offer) { o.Windows = ws } }
	span := func(from, to time.Time, floor uint64) *pb.Interval {
		return &pb.Interval{StartUnixMs: from.UnixMilli(), EndUnixMs: to.UnixMilli(), FloorMicros: floor}
	}
	weekly := func(ws ...*pb.WeeklyWindow) func(*pb.Offer) { return func(o *pb.Offer) { o.Weekly = ws } }
	wk := func(day, fromHour, toDay, toHour int) *pb.WeeklyWindow {
		return &pb.WeeklyWindow{StartMinute: uint32(day*24+fromHour) * 60, EndMinute: uint32(toDay*24+toHour) * 60}
	}
	startsAt := func(want time.Time) func(*testing.T, Candidate) {
		return func(t *testing.T, c Candidate) {
			if !c.Start.Equal(want) {
				t.Errorf("start %s, want %s", c.Start, want)
			}
		}
	}
	runCheckCases(t, []checkCase{
		{name: "one-off window covers now", offer: oneOff(span(at(0, 10), at(0, 20), 0)), verify: startsAt(mtNow)},
		{name: "later one-off window", offer: oneOff(span(at(0, 10), at(0, 14), 0), span(at(1, 8), at(1, 18), 0)), verify: startsAt(at(1, 8))},
		{name: "windows that touch join", offer: oneOff(span(at(0, 10), at(0, 14), 0), span(at(0, 14), at(0, 20), 0)), verify: startsAt(mtNow)},
		{name: "no window long enough", offer: oneOff(span(at(0, 10), at(0, 14), 0), span(at(1, 8), at(1, 11), 0)), check: "window", detail: "no window covers 4h0m0s"},
		{name: "window after the latest start", offer: oneOff(span(at(1, 8), at(1, 18), 0)), bid: func(b *pb.Bid) { b.LatestStartUnixMs = at(0, 18).UnixMilli() },
			check: "window", detail: "no window covers"},
		{name: "window floor above max", offer: oneOff(span(at(0, 10), at(0, 20), 2_600_000)), check: "window", detail: "floors above 2.5"},
		{name: "window floor raises the price", offer: oneOff(span(at(0, 10), at(0, 20), 2_200_000)), verify: func(t *testing.T, c Candidate) {
			if c.PriceMicros != 2_200_000 {
				t.Errorf("price %d, want the floor 2200000", c.PriceMicros)
			}
		}},
		{name: "dear window skipped for a cheap one", offer: oneOff(span(at(0, 10), at(0, 20), 2_600_000), span(at(1, 0), at(1, 6), 0)), verify: startsAt(at(1, 0))},
		{name: "latest start passed", bid: func(b *pb.Bid) { b.LatestStartUnixMs = mtNow.Add(-time.Hour).UnixMilli() }, check: "window", detail: "has passed"},
		{name: "earliest start in the future", bid: func(b *pb.Bid) { b.EarliestStartUnixMs = at(2, 9).UnixMilli() }, verify: startsAt(at(2, 9))},
		{name: "weekly window today", offer: weekly(wk(0, 8, 0, 18)), verify: startsAt(mtNow)},
		{name: "weekly window tomorrow", offer: weekly(wk(1, 8, 1, 18)), verify: startsAt(at(1, 8))},
		{name: "weekly window next week", offer: weekly(wk(0, 8, 0, 13)), verify: startsAt(at(7, 8))},
		{name: "weekly window next week beyond the latest start", offer: weekly(wk(0, 8, 0, 13)), bid: func(b *pb.Bid) { b.LatestStartUnixMs = at(3, 0).UnixMilli() },
			check: "window", detail: "no window covers"},
		{name: "weekly windows join over the weekend", offer: weekly(wk(0, 0, 0, 2), wk(6, 22, 7, 0)), bid: func(b *pb.Bid) {
			b.EarliestStartUnixMs, b.DurationSeconds = at(6, 23).UnixMilli(), 3*3600
		}, verify: startsAt(at(6, 23))},
		{name: "whole week always available", offer: weekly(wk(0, 0, 3, 0), wk(3, 0, 7, 0)), bid: func(b *pb.Bid) { b.DurationSeconds = 60 * 3600 }, verify: startsAt(mtNow)},
		{name: "weekly floor above max", offer: weekly(&pb.WeeklyWindow{StartMinute: 0, EndMinute: 3 * 1440, FloorMicros: 3_000_000}), check: "window", detail: "floors above"},
		{name: "one-off beats weekly when earlier", offer: func(o *pb.Offer) {
			oneOff(span(at(1, 0), at(1, 6), 0))(o)
			weekly(wk(1, 8, 1, 18))(o)
		}, verify: startsAt(at(1, 0))},
	})
}

func TestScorers(t *testing.T) {
	cfg := DefaultMatchConfig()
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"price free", priceScore(0, 100), 1},
		{"price at max", priceScore(100, 100), 0},
		{"price half", priceScore(50, 100), 0.5},
		{"price above max", priceScore(150, 100), 0},
		{"price no max", priceScore(1, 0), 0},
		{"latency zero", latencyScore(0, cfg.RTTRef), 1},
		{"latency at ref", latencyScore(100*time.Millisecond, cfg.RTTRef), 0.5},
		{"latency 3×ref", latencyScore(300*time.Millisecond, cfg.RTTRef), 0.25},
		{"window at earliest", windowFitScore(10, 10, 20), 1},
		{"window midway", windowFitScore(15, 10, 20), 0.5},
		{"window at latest", windowFitScore(20, 10, 20), 0},
		{"window no range", windowFitScore(10, 10, 10), 1},
		{"total", ScoreWeights{Price: 1, Reliability: 1}.total(Scores{Price: 1, Reliability: 0.5, Latency: 0.1}), 0.75},
		{"total no weights", ScoreWeights{}.total(Scores{Price: 1}), 0},
		{"eff neutral", cfg.effectivePrice(1000, 1, 0), 1000},
		{"eff reliability", cfg.effectivePrice(1000, 0.9, 0), 1100},
		{"eff rtt", cfg.effectivePrice(1000, 1, 100*time.Millisecond), 1500},
		{"eff both", cfg.effectivePrice(1000, 0.5, 200*time.Millisecond), 3000},
		{"eff reliability clamped", cfg.effectivePrice(1000, 7, 0), 1000},
		{"clamp NaN", clamp01(math.NaN()), 0},
	} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestLeaseTotal(t *testing.T) {
	for _, tc := range []struct {
		price uint64
		gpus  uint32
		secs  uint64
		want  uint64
	}{
		{2_000_000, 8, 4 * 3600, 64_000_000},
		{1_000_000, 1, 1, 278},                                      // 277.7… rounded up
		{1_000_000, 1, 3600, 1_000_000},                             // exact
		{10_000_000_000, 1024, 366 * 86400, 89_948_160_000_000_000}, // 1e10 × 1024 × 8784 h
		{math.MaxUint64, 2, 3600, math.MaxUint64},
		{math.MaxUint64 / 2, 1, 1 << 40, math.MaxUint64},
	} {
		if got := LeaseTotal(tc.price, tc.gpus, tc.secs); got != tc.want {
			t.Errorf("LeaseTotal(%d, %d, %d) = %d, want %d", tc.price, tc.gpus, tc.secs, got, tc.want)
		}
	}
}

func TestMatchConfigValidate(t *testing.T) {
	if err := DefaultMatchConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		mod   func(*MatchConfig)
	}{
		{"alpha", func(c *MatchConfig) { c.Alpha = -1 }},
		{"beta", func(c *MatchConfig) { c.Beta = math.NaN() }},
		{"weights.latency", func(c *MatchConfig) { c.Weights.Latency = 1000 }},
		{"rtt_ref", func(c *MatchConfig) { c.RTTRef = 0 }},
		{"start_horizon", func(c *MatchConfig) { c.StartHorizon = -time.Hour }},
	} {
		c := DefaultMatchConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Validate said %v", tc.field, err)
		}
		if got := NewMatcher(c, nil, nil).Config(); got.Validate() != nil {
			t.Errorf("%s: NewMatcher kept an invalid config %+v", tc.field, got)
		}
	}
}

// mtBook fills a book with offers made by mods of mtOffer, one per issuer
// in order (ids o0, o1, …).
func mtBook(t *testing.T, mods ...func(*pb.Offer)) *Book {
	t.Helper()
	b := NewBook()
	for i, mod := range mods {
		o := mtOffer(mtPeers[i%len(mtPeers)], "o"+string(rune('0'+i)))
		if mod != nil {
			mod(o)
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func price(micros uint64) func(*pb.Offer) { return func(o *pb.Offer) { o.PriceMicros = micros } }

func candidateIDs(cs []Candidate) string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.OfferID())
	}
	return strings.Join(ids, " ")
}

func TestMatchRanksByEffectivePrice(t *testing.T) {
	b := mtBook(t, price(2_000_000), price(2_200_000), price(2_100_000), price(2_300_000), price(2_600_000))
	// The others' RTTs are unknown: they rank at the worst measured, o2's
	// 100 ms, each × 1.5.
	src := mtSources{
		rel: map[peer.ID]float64{mtPeers[0]: 0.8},                          // o0: 2.0 × 1.2 × 1.5 = 3.6
		rtt: map[peer.ID]time.Duration{mtPeers[2]: 100 * time.Millisecond}, // o2: 2.1 × 1.5 = 3.15
	}
	m := NewMatcher(DefaultMatchConfig(), src, src)
	res := m.Match(b.Snapshot(), mtBid(), mtNow, 0)
	if got := candidateIDs(res.Candidates); got != "o2 o1 o3 o0" {
		t.Errorf("ranking %q, want o2 o1 o3 o0 (o4 is above the max price)", got)
	}
	if res.Considered != 4 || res.Feasible != 4 {
		t.Errorf("considered %d, feasible %d; want 4 and 4 (o4 cut by the index)", res.Considered, res.Feasible)
	}
	c := res.Candidates[3]
	if math.Abs(c.EffectivePriceMicros-3_600_000) > 1e-6 || c.Reliability != 0.8 || c.Scores.Reliability != 0.8 || math.Abs(c.Scores.Price-0.2) > 1e-9 {
		t.Errorf("o0: %+v", c)
	}
	if m := c.ScoreMap(); m["reliability"] != 0.8 || m["total"] != c.Scores.Total {
		t.Errorf("ScoreMap %v", m)
	}
	top2 := m.Match(b.Snapshot(), mtBid(), mtNow, 2)
	if got := candidateIDs(top2.Candidates); got != "o2 o1" {
		t.Errorf("top 2 %q, want o2 o1", got)
	}
}

// An unknown RTT is never ranked nearer than a measured one (issue 11,
// attack 2: 8 unreachable fake offers, their RTTs unknown and so free,
// ranked above the honest provider a renter had measured).
func TestAnUnknownRTTRanksAsTheWorstMeasured(t *testing.T) {
	b := mtBook(t, price(1_900_000), price(2_000_000), price(2_000_000))
	src := mtSources{rtt: map[peer.ID]time.Duration{mtPeers[1]: 300 * time.Millisecond, mtPeers[2]: 20 * time.Millisecond}}
	res := NewMatcher(DefaultMatchConfig(), nil, src).Match(b.Snapshot(), mtBid(), mtNow, 0)
	if got := candidateIDs(res.Candidates); got != "o2 o0 o1" {
		t.Fatalf("ranking %q, want o2 o0 o1", got)
	}
	unknown, worst := res.Candidates[1], res.Candidates[2]
	if unknown.RTTKnown || math.Abs(unknown.EffectivePriceMicros/1.9-worst.EffectivePriceMicros/2.0) > 1e-6 || unknown.Scores.Latency != worst.Scores.Latency {
		t.Errorf("unknown RTT %+v ranks otherwise than the worst measured %+v", unknown, worst)
	}
}

// A matcher that knows no RTT (a provider quoting its own offer for a
// renter whose RTT it cannot know) leaves a bid's max_rtt to the renter;
// a renter's, which measures and estimates, fails what it knows neither
// way.
func TestOnlyABlindMatcherPassesAnUnknownRTT(t *testing.T) {
	b := mtBook(t, nil)
	bid := mtBid()
	bid.MaxRttMs = 50
	if res := NewMatcher(DefaultMatchConfig(), nil, nil).Match(b.Snapshot(), bid, mtNow, 0); len(res.Candidates) != 1 {
		t.Errorf("a blind matcher: %d candidates, want the offer", len(res.Candidates))
	}
	if res := NewMatcher(DefaultMatchConfig(), nil, mtSources{}).Match(b.Snapshot(), bid, mtNow, 0); len(res.Candidates) != 0 {
		t.Errorf("a renter's matcher: %d candidates for an RTT it knows neither way", len(res.Candidates))
	}
}

func TestMatchBreaksTies(t *testing.T) {
	later := func(o *pb.Offer) {
		o.Windows = []*pb.Interval{{StartUnixMs: mtNow.Add(3 * time.Hour).UnixMilli(), EndUnixMs: mtNow.Add(9 * time.Hour).UnixMilli()}}
	}
	b := mtBook(t, nil, later, nil, nil)
	bid := mtBid()
	bid.LatestStartUnixMs = mtNow.Add(6 * time.Hour).UnixMilli()
	res := NewMatcher(DefaultMatchConfig(), nil, nil).Match(b.Snapshot(), bid, mtNow, 0)
	// Equal effective prices: o1 starts later (lower window fit) and goes
	// last; the rest go by issuer.
	want := []peer.ID{mtPeers[0], mtPeers[2], mtPeers[3]}
	slices.Sort(want)
	var got []peer.ID
	for _, c := range res.Candidates {
		got = append(got, c.Issuer)
	}
	if len(got) != 4 || got[3] != mtPeers[1] || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("order %v, want %v then %s", got, want, mtPeers[1])
	}
}

func TestExplain(t *testing.T) {
	vram := func(o *pb.Offer) { o.Gpus[0].VramBytes = 24 << 30 }
	fr := func(o *pb.Offer) { o.Region.Country = "FR" }
	inference := func(o *pb.Offer) { o.WorkloadClasses = []string{"inference"} }
	b := mtBook(t, vram, vram, vram, fr, fr, price(2_600_000), inference, nil)
	bid := mtBid()
	bid.RegionsAllowed = []string{"DE"}
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	ex := m.Explain(b.Snapshot(), bid, mtNow)
	want := `by the first check each fails: 3 offers: vram below 40 GB; 2: region not allowed; 1: silver price above 2.5; 1: workload class "training" not accepted; 1 feasible`
	if got := ex.String(); got != want {
		t.Errorf("Explain:\n got %s\nwant %s", got, want)
	}
	if ex.Offers != 8 || ex.Feasible != 1 || ex.Reasons[0].Example != "vram 24 GB < 40 GB required" || ex.Reasons[0].Check != "vram" {
		t.Errorf("Explanation %+v", ex)
	}
	if got := (Explanation{}).String(); got != "no offers" {
		t.Errorf("empty Explanation: %q", got)
	}
	// Match counts only what the indexes let through: they cut the small
	// GPUs, the FR offers and the dear one unseen.
	res := m.Match(b.Snapshot(), bid, mtNow, 5)
	rej := res.Rejected()
	if res.Considered != 2 || len(rej) != 1 || rej[0].Check != "workload" || rej[0].Count != 1 {
		t.Errorf("considered %d, rejected %+v", res.Considered, rej)
	}
}

func TestMatchExcluder(t *testing.T) {
	b := mtBook(t, nil, nil)
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	if n := len(m.Match(b.Snapshot(), mtBid(), mtNow, 5).Candidates); n != 2 {
		t.Fatalf("%d candidates, want 2", n)
	}
	res := m.WithExcluder(mtExcluded{mtPeers[0]: true}).Match(b.Snapshot(), mtBid(), mtNow, 5)
	if len(res.Candidates) != 1 || res.Candidates[0].Issuer != mtPeers[1] {
		t.Errorf("with o0's issuer excluded: %s", candidateIDs(res.Candidates))
	}
}

func TestMatchOddBids(t *testing.T) {
	b := mtBook(t, nil)
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	for name, mod := range map[string]func(*pb.Bid){
		"no tier":       func(b *pb.Bid) { b.Tier = pb.Tier_TIER_UNSPECIFIED },
		"unknown model": func(b *pb.Bid) { b.Gpu.Models = []string{"TPU"} },
		"no country":    func(b *pb.Bid) { b.RegionsAllowed = []string{"XX"} },
		"no gpu":        func(b *pb.Bid) { b.Gpu = nil; b.MaxPriceMicros = 0 },
	} {
		bid := mtBid()
		mod(bid)
		if res := m.Match(b.Snapshot(), bid, mtNow, 5); len(res.Candidates) != 0 {
			t.Errorf("%s: %d candidates", name, len(res.Candidates))
		}
	}
	if res := m.Match(NewBook().Snapshot(), mtBid(), mtNow, 5); len(res.Candidates)+res.Considered != 0 {
		t.Errorf("empty book: %+v", res)
	}
}

// A provider's several offers (several machines) list once, by the best,
// unless the bid may be split among providers.
func TestMatchListsAProviderOnce(t *testing.T) {
	b := NewBook()
	for i, price := range []uint64{2_000_000, 1_800_000} {
		o := mtOffer(mtPeers[0], fmt.Sprintf("machine-%d", i))
		o.PriceMicros = price
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	other := mtOffer(mtPeers[1], "o")
	if err := b.PutOffer(other, mtNow); err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	res := m.Match(b.Snapshot(), mtBid(), mtNow, 5)
	if got := candidateIDs(res.Candidates); got != "machine-1 o" || res.Feasible != 3 {
		t.Errorf("one bid, one lease: %q, %d feasible; want machine-1 then o, of 3", got, res.Feasible)
	}
	split := mtBid()
	split.Gpu.Count, split.Gpu.MinPerProvider = 24, 8
	if got := candidateIDs(m.Match(b.Snapshot(), split, mtNow, 5).Candidates); got != "machine-1 machine-0 o" && got != "machine-1 o machine-0" {
		t.Errorf("a bid split among providers: %q; want every machine", got)
	}
}

// An explanation for a model the book lacks names the models it has
// instead, most offers first, each from its least price for the tier,
// and quotes the cheapest offer that failed as the reason's example.
func TestExplainNamesTheNearestModels(t *testing.T) {
	b := mtBook(t, nil, price(1_800_000), func(o *pb.Offer) {
		o.Gpus[0].Model, o.PriceMicros = "L40S", 900_000
	})
	bid := mtBid()
	bid.Gpu.Models = []string{"A100"}
	ex := NewMatcher(DefaultMatchConfig(), nil, nil).Explain(b.Snapshot(), bid, mtNow)
	if len(ex.Nearest) != 2 || ex.Nearest[0].Model != "H100" || ex.Nearest[0].Offers != 2 || ex.Nearest[0].PriceMicros != 1_800_000 ||
		ex.Nearest[1].Model != "L40S" || ex.Nearest[1].Offers != 1 || ex.Nearest[1].PriceMicros != 900_000 {
		t.Errorf("nearest %+v", ex.Nearest)
	}
	if len(ex.Reasons) != 1 || ex.Reasons[0].Example != "models L40S; bid wants A100" {
		t.Errorf("reasons %+v; want the cheapest miss as the example", ex.Reasons)
	}
	if want := "model not A100 blocks every offer: without it 3 fit, the cheapest asks 0.90/GPU-h; nearest models: H100 (2 fit, from 1.80/GPU-h for 8 GPUs), L40S (1 fit, from 0.90/GPU-h for 8 GPUs); by the first check each fails: 3 offers: model not A100; 0 feasible"; ex.String() != want {
		t.Errorf("explanation\n got %s\nwant %s", ex.String(), want)
	}
}

// A packed coordinate's error is never below the offer's: an estimator
// that refuses an error above some bound refuses it packed too.
func TestPackedCoordinateErrorRoundsUp(t *testing.T) {
	for _, e := range []float64{1 + 1e-9, 0.2, 1, 0.1 + 1e-12, 3.3} {
		c := unpackCoord(packCoord(&pb.NetworkCoordinate{Vec: []float64{0.01, -0.02}, Error: e, Height: 1e-5}))
		if c.Error < e || c.Error > e*(1+1e-6) || len(c.Vec) != 2 {
			t.Errorf("error %v packs to %v (vec %v)", e, c.Error, c.Vec)
		}
	}
	if packCoord(nil) != nil || unpackCoord(nil) != nil {
		t.Error("no coordinate packs to something")
	}
}
