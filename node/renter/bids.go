package renter

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bid defaults and bounds for the API.
const (
	DefaultBidWait = 3 * time.Second
	MaxBidWait     = time.Minute
	DefaultLimit   = 10
)

// BuildBid turns an API bid request into a wire bid issued by issuer at
// now; a GPU the catalog lacks is named as book's offers name it (see
// views.ResolveGPUs; book may be nil). Mistakes in the request come back
// as api.BadRequest naming the field; the bid's rules are market.NewBid's.
func BuildBid(req api.BidRequest, issuer peer.ID, sw p2p.Swarm, now time.Time, pays *pb.Settlement, book *market.Snapshot, needs []*pb.DatasetNeed) (*pb.Bid, error) {
	spec, err := bidSpec(req, book)
	if err != nil {
		return nil, fault.Invalid(err)
	}
	spec.Settlement, spec.Datasets = pays, needs
	b, err := market.NewBid(issuer, NewID("bid-"), spec, now, sw.Limits())
	if err != nil {
		return nil, fault.Invalid(err)
	}
	return b, nil
}

// bidSpec checks the request's fields, each against its range, and turns
// them into wire units.
func bidSpec(req api.BidRequest, book *market.Snapshot) (market.BidSpec, error) {
	var s market.BidSpec
	if req.Count < 1 || req.Count > 1024 {
		return s, fault.Fieldf("count", req.Count, "want 1 to 1024")
	}
	if !(req.Hours >= 1.0/60 && req.Hours <= 24*366) {
		return s, fault.Fieldf("hours", req.Hours, "want 1/60 (a minute) to %d", 24*366)
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"min_vram_gib", req.MinVRAMGiB, 1 << 20}, {"min_cpu_cores", req.MinCPUCores, 1 << 24}, {"min_ram_gib", req.MinRAMGiB, 1 << 24}, {"min_disk_gib", req.MinDiskGiB, 1 << 24}, {"min_down_mbps", req.MinDownMbps, 1 << 24}, {"min_up_mbps", req.MinUpMbps, 1 << 24}, {"min_per_provider", req.MinPerProvider, req.Count}, {"max_rtt_ms", req.MaxRTTMillis, 60_000}, {"limit", req.Limit, 1000}, {"wait_ms", req.WaitMillis, int(MaxBidWait.Milliseconds())}} {
		if f.v < 0 || f.v > f.max {
			return s, fault.Fieldf(f.name, f.v, "want 0 to %d", f.max)
		}
	}
	if !(req.StartWithinHours >= 0 && req.StartWithinHours <= 24*366) {
		return s, fault.Fieldf("start_within_hours", req.StartWithinHours, "want 0 to %d", 24*366)
	}
	models, err := views.ResolveGPUs("gpus", req.GPUs, book)
	if err != nil {
		return s, err
	}
	formFactor, err := views.ResolveFormFactor(req.FormFactor)
	if err != nil {
		return s, err
	}
	if _, err := market.ParseQuery(req.Where); err != nil {
		return s, err
	}
	if _, _, err := SortField(req.Sort); err != nil {
		return s, err
	}
	if req.MinReliability < 0 || req.MinReliability > 1 {
		return s, fault.Fieldf("min_reliability", req.MinReliability, "want 0 to 1")
	}
	if w := req.LatencyWeight; w != nil && !(*w >= 0 && *w <= api.MaxLatencyWeight) {
		return s, fault.Fieldf("latency_weight", *w, "want 0 to %d", api.MaxLatencyWeight)
	}
	tier, err := market.TierFromName(cmp.Or(req.Tier, "silver"))
	if err != nil {
		return s, err
	}
	maxPrice, err := market.ParsePrice(req.MaxPrice)
	if err != nil {
		return s, fault.Fieldf("max_price", req.MaxPrice, "want a price of 0 or more per GPU-hour, with at most 6 decimal places, such as 2.50")
	}
	var cc uint32
	if req.MinCompute != "" {
		if cc, err = config.ParseComputeCapability(req.MinCompute); err != nil {
			return s, fmt.Errorf("min_compute_capability: %w", err)
		}
	}
	return market.BidSpec{
		Models: models, FormFactor: formFactor, NVLink: req.NVLink, MinVRAMBytes: uint64(req.MinVRAMGiB) << 30, MinComputeCapability: cc,
		Count: uint32(req.Count), MinPerProvider: uint32(req.MinPerProvider),
		HostMin: &pb.HostSpec{CpuCores: uint32(req.MinCPUCores), RamBytes: uint64(req.MinRAMGiB) << 30, DiskBytes: uint64(req.MinDiskGiB) << 30,
			DownBitsPerSecond: uint64(req.MinDownMbps) * 1e6, UpBitsPerSecond: uint64(req.MinUpMbps) * 1e6},
		Tier: tier, Currency: strings.ToUpper(cmp.Or(req.Currency, "USD")), MaxPriceMicros: maxPrice,
		DurationSeconds: uint64(math.Ceil(req.Hours * 3600)),
		StartWithin:     time.Duration(req.StartWithinHours * float64(time.Hour)),
		RegionsAllowed:  upper(req.Regions), RegionsDenied: upper(req.DenyRegions),
		MaxRTTMillis: uint32(req.MaxRTTMillis), MinReliabilityPermille: uint32(math.Round(req.MinReliability * 1000)),
		PreemptionOK: req.PreemptionOK, WorkloadClass: req.WorkloadClass, Image: req.Image,
	}, nil
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

// NewID is prefix and 16 random hex digits: a bid's or a lease's ID.
func NewID(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// SortField reads a request's sort, "FIELD" or "FIELD-" for falling;
// "" is none.
func SortField(s string) (field string, desc bool, err error) {
	if s == "" {
		return "", false, nil
	}
	field, desc = strings.CutSuffix(s, "-")
	if err := market.CheckSortField(field); err != nil {
		return "", false, fault.Fieldf("sort", s, "a query field, with - after it for falling: %v", err)
	}
	return field, desc, nil
}
