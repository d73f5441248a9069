package market

import (
	"strconv"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"pgregory.net/rapid"
)

// The choices of the book's state machine (book_machine_test.go): what
// chooses them, and the offers and bids they make.

// chooser picks the machine's next choice: a number in [0, n).
type chooser interface {
	choose(label string, n int) int
}

// failer is what the machine reports to: *testing.T or *rapid.T.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) choose(label string, n int) int {
	if n <= 1 {
		return 0
	}
	return rapid.IntRange(0, n-1).Draw(c.t, label)
}

// oneOf is usual for a choice of 0 to 3, else one of others.
func oneOf[V any](c chooser, label string, usual V, others ...V) V {
	if i := c.choose(label, 4+len(others)); i >= 4 {
		return others[i-4]
	}
	return usual
}

// machineIssuer is an issuer with its key, for the signed path, and the
// rank the book's limits give it.
type machineIssuer struct {
	key  crypto.PrivKey
	id   peer.ID
	rank int
}

// machineIssuers: three strangers, two known, one own; the fifth signs
// with secp256k1, which Open reads through libp2p's general path.
var machineIssuers = func() []machineIssuer {
	var out []machineIssuer
	for i, rank := range []int{RankUnknown, RankUnknown, RankUnknown, RankKnown, RankKnown, RankOwn} {
		r := &seededReader{b: byte(40 + i)}
		var key crypto.PrivKey
		var err error
		if i == 4 {
			key, _, err = crypto.GenerateSecp256k1Key(r)
		} else {
			key, _, err = crypto.GenerateEd25519Key(r)
		}
		if err != nil {
			panic(err)
		}
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			panic(err)
		}
		out = append(out, machineIssuer{key, id, rank})
	}
	return out
}()

func machineRank(p peer.ID) int {
	for _, is := range machineIssuers {
		if is.id == p {
			return is.rank
		}
	}
	return RankUnknown
}

// Small domains, so offers share buckets and tie: models in several
// spellings of one catalog model, a family name, one the catalog lacks.
var (
	machineModels    = []string{"H100 SXM", "A100", "L40S", "h100-sxm5", "H100", "Foo 9"}
	machineCountries = []string{"DE", "FR", "US"}
	machineClasses   = []string{"training", "inference", "m-a", "m-b", "m-c", "m-d", "m-e", "m-f", "m-g", "m-h", "m-i", "m-j"}
	machineFilters   = []string{"", "H100", "H100 SXM", "L40S", "Foo 9", "A100"}
)

// machineOffer draws an offer's content; 0 everywhere is a plain offer
// the book takes. The rest reach every shape the index and its probes
// tell apart: several groups and models, sizes not whole GiB, free and
// missing tiers, unknown workload classes, steps past a probe's byte.
func machineOffer(c chooser, issuer peer.ID, id string, seq uint64, now time.Time) *pb.Offer {
	o := mtOffer(issuer, id)
	o.Header.Seq = seq
	o.Header.CreatedUnixMs = now.Add(-oneOf(c, "age", time.Minute, 0, 3*time.Hour)).UnixMilli()
	o.Header.ExpiresUnixMs = now.Add(oneOf(c, "ttl", 2*time.Hour, 10*time.Minute, 30*time.Minute, -time.Minute, 23*time.Hour)).UnixMilli()
	o.Withdrawn = oneOf(c, "withdrawn", false, true)
	o.Gpus = nil
	for i := range 1 + oneOf(c, "groups", 0, 1, 2) {
		o.Gpus = append(o.Gpus, &pb.GPUGroup{
			Model:             machineModels[c.choose("model"+strconv.Itoa(i), len(machineModels))],
			Count:             oneOf[uint32](c, "count", 8, 1, 2, 4, 0, 1<<17),
			VramBytes:         oneOf[uint64](c, "vram", 80<<30, 24<<30, 40e9, 79e9, 21<<29, 1<<50),
			ComputeCapability: oneOf[uint32](c, "cc", 90, 80, 300),
			Interconnect:      oneOf(c, "link", "sxm", "", "nvlink"),
		})
	}
	o.Host.CpuCores = oneOf[uint32](c, "cores", 64, 8, 1<<20)
	o.Host.RamBytes = oneOf[uint64](c, "ram", 512<<30, 128e9, 1<<62)
	o.Host.DiskBytes = oneOf[uint64](c, "disk", 2000<<30, 0)
	o.Host.UpBitsPerSecond = oneOf[uint64](c, "up", 1e10, 15e8+1)
	o.HostWhole = oneOf(c, "host_whole", false, true)
	o.GpusWhole = oneOf(c, "gpus_whole", false, true)
	o.GpuStep = oneOf[uint32](c, "step", 0, 2, 300)
	o.Region.Country = machineCountries[c.choose("country", len(machineCountries))]
	o.Currency = oneOf(c, "currency", "USD", "EUR")
	o.PriceMicros = uint64(1+c.choose("price", 6)) * 500_000
	if oneOf(c, "free", false, true) {
		o.PriceMicros = 0
	}
	o.TierPrices = nil
	for _, tier := range propTiers {
		if c.choose("override", 2) == 1 {
			o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: tier, MicrosPerGpuHour: uint64(c.choose("tier_price", 6)) * 500_000}) // 0: free
		}
	}
	o.Tiers = oneOf(c, "tiers", propTiers, []pb.Tier{pb.Tier_TIER_GOLD}, []pb.Tier{pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE},
		[]pb.Tier{pb.Tier_TIER_BRONZE, pb.Tier_TIER_BRONZE}, nil, []pb.Tier{pb.Tier_TIER_UNSPECIFIED, pb.Tier(7)})
	o.MinDurationSeconds = oneOf[uint64](c, "min_h", 1, 2, 1<<40) * 3600
	o.MaxDurationSeconds = oneOf[uint64](c, "max_h", 48, 4, 1<<40) * 3600
	o.WorkloadClasses = nil
	for range oneOf(c, "n_classes", 0, 1, 2) {
		o.WorkloadClasses = append(o.WorkloadClasses, machineClasses[c.choose("class", len(machineClasses))])
	}
	o.ImageAllow = oneOf(c, "allow", nil, []string{"docker.io/"})
	o.ImageDeny = oneOf(c, "deny", nil, []string{"docker.io/library/"})
	switch c.choose("windows", 3) {
	case 1:
		start := now.Add(time.Duration(c.choose("w_start_h", 24)-4) * time.Hour)
		o.Windows = []*pb.Interval{{StartUnixMs: start.UnixMilli(), EndUnixMs: start.Add(time.Duration(1+c.choose("w_len_h", 10)) * time.Hour).UnixMilli(),
			FloorMicros: oneOf[uint64](c, "floor", 0, 2_500_000)}}
	case 2:
		from := uint32(c.choose("wk_start_h", 7*24-1)) * 60
		o.Weekly = []*pb.WeeklyWindow{{StartMinute: from, EndMinute: from + 60, FloorMicros: oneOf[uint64](c, "wk_floor", 0, 2_000_000)}}
	}
	return o
}

// machineBid draws a bid, to put in the book or to match.
func machineBid(c chooser, issuer peer.ID, id string, seq uint64, now time.Time) *pb.Bid {
	b := mtBid()
	b.Header.Issuer, b.Header.Id, b.Header.Seq = []byte(issuer), id, seq
	b.Header.CreatedUnixMs = now.Add(-time.Minute).UnixMilli()
	b.Header.ExpiresUnixMs = now.Add(oneOf(c, "bid_ttl", time.Hour, 10*time.Minute, -time.Minute)).UnixMilli()
	b.Gpu.Models = oneOf(c, "bid_models", nil, []string{"H100"}, []string{"A100", "L40S"}, []string{"Foo 9"}, []string{"H100 SXM"})
	b.Gpu.MinVramBytes = oneOf[uint64](c, "min_vram", 0, 40<<30, 80<<30, 40e9)
	b.Gpu.MinComputeCapability = oneOf[uint32](c, "min_cc", 0, 80, 90)
	b.Gpu.Count = uint32(1 + c.choose("bid_count", 8))
	b.Gpu.MinPerProvider = uint32(c.choose("min_per_provider", int(b.Gpu.Count)+1))
	b.Tier = propTiers[c.choose("bid_tier", 3)]
	b.PreemptionOk = oneOf(c, "preemption_ok", true, false)
	b.Currency = oneOf(c, "bid_currency", "USD", "EUR")
	b.MaxPriceMicros = oneOf[uint64](c, "max_price", 3_000_000, 1_000_000, 2_000_000, 0)
	b.DurationSeconds = oneOf[uint64](c, "hours", 1, 3, 30) * 3600
	b.EarliestStartUnixMs = now.Add(time.Duration(c.choose("earliest_h", 6)-1) * time.Hour).UnixMilli()
	b.HostMin.CpuCores = oneOf[uint32](c, "min_cores", 0, 16)
	b.HostMin.RamBytes = oneOf[uint64](c, "min_ram", 128<<30, 0, 128e9)
	b.RegionsAllowed = oneOf(c, "allowed", nil, []string{"DE"}, []string{"FR", "US"})
	b.WorkloadClass = oneOf(c, "bid_class", "training", "", "inference", "m-j")
	b.Image = oneOf(c, "image", "docker.io/pytorch/pytorch", "docker.io/library/ubuntu")
	return b
}

// zeroChooser always chooses the usual.
type zeroChooser struct{}

func (zeroChooser) choose(string, int) int { return 0 }
