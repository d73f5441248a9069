package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bid defaults and bounds for the API.
const (
	defaultBidWait = 3 * time.Second
	maxBidWait     = time.Minute
	defaultLimit   = 10
)

// BuildBid turns an API bid request into a wire bid issued by issuer at
// now. Mistakes in the request come back as api.BadRequest naming the
// field; the bid's rules are market.NewBid's.
func BuildBid(req api.BidRequest, issuer peer.ID, sw p2p.Swarm, now time.Time) (*pb.Bid, error) {
	spec, err := bidSpec(req)
	if err != nil {
		return nil, fault.Invalid(err)
	}
	b, err := market.NewBid(issuer, newID("bid-"), spec, now, sw.Limits())
	if err != nil {
		return nil, fault.Invalid(err)
	}
	return b, nil
}

// bidSpec checks the request's fields, each against its range, and turns
// them into wire units.
func bidSpec(req api.BidRequest) (market.BidSpec, error) {
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
	}{{"min_vram_gib", req.MinVRAMGiB, 1 << 20}, {"min_cpu_cores", req.MinCPUCores, 1 << 24}, {"min_ram_gib", req.MinRAMGiB, 1 << 24}, {"min_disk_gib", req.MinDiskGiB, 1 << 24}, {"min_down_mbps", req.MinDownMbps, 1 << 24}, {"min_up_mbps", req.MinUpMbps, 1 << 24}, {"min_per_provider", req.MinPerProvider, req.Count}, {"max_rtt_ms", req.MaxRTTMillis, 60_000}, {"limit", req.Limit, 1000}, {"wait_ms", req.WaitMillis, int(maxBidWait.Milliseconds())}} {
		if f.v < 0 || f.v > f.max {
			return s, fault.Fieldf(f.name, f.v, "want 0 to %d", f.max)
		}
	}
	if !(req.StartWithinHours >= 0 && req.StartWithinHours <= 24*366) {
		return s, fault.Fieldf("start_within_hours", req.StartWithinHours, "want 0 to %d", 24*366)
	}
	models, err := views.ResolveGPUs("gpus", req.GPUs)
	if err != nil {
		return s, err
	}
	formFactor, err := views.ResolveFormFactor(req.FormFactor)
	if err != nil {
		return s, err
	}
	if req.MinReliability < 0 || req.MinReliability > 1 {
		return s, fault.Fieldf("min_reliability", req.MinReliability, "want 0 to 1")
	}
	if w := req.LatencyWeight; w != nil && !(*w >= 0 && *w <= book.MaxLatencyWeight) {
		return s, fault.Fieldf("latency_weight", *w, "want 0 to %d", book.MaxLatencyWeight)
	}
	tier, err := market.TierFromName(cmp.Or(req.Tier, "silver"))
	if err != nil {
		return s, err
	}
	maxPrice, err := market.ParsePrice(req.MaxPrice)
	if err != nil {
		return s, fmt.Errorf("max_price: %w", err)
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

// newID is prefix and 16 random hex digits: a bid's or a lease's ID.
func newID(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Match ranks the offers in this node's book for a bid, without
// publishing anything; when nothing fits it explains why.
func (n *Node) Match(ctx context.Context, req api.BidRequest) (api.MatchResult, error) {
	now := n.clock.Now()
	b, err := BuildBid(req, n.id, n.swarm, now)
	if err != nil {
		return api.MatchResult{}, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	snap := n.market.Snapshot()
	mt := n.market.MatcherFor(req)
	res := mt.Match(snap, b, now, limit)
	out := api.MatchResult{Considered: res.Considered, Feasible: res.Feasible, Candidates: []api.CandidateView{}}
	scores := n.reputation.Scores()
	for i, c := range res.Candidates {
		out.Candidates = append(out.Candidates, views.Candidate(i+1, c, scores))
	}
	// The walk stops once no cheaper offer can enter the list, so its
	// counts are of what it saw; a quote's counts are of the whole book,
	// and so is the explanation of what did not fit.
	ex := mt.Explain(snap, b, now)
	out.Considered, out.Feasible = ex.Offers, ex.Feasible
	for _, r := range ex.Reasons {
		out.Reasons = append(out.Reasons, api.ReasonView{Check: r.Check, Kind: r.Kind, Offers: r.Count, Example: r.Example})
	}
	for _, mm := range ex.Nearest {
		nv := api.NearView{Model: mm.Model, Offers: mm.Offers}
		if mm.PriceMicros > 0 {
			nv.From = market.FormatPrice(mm.PriceMicros)
		}
		out.Nearest = append(out.Nearest, nv)
	}
	if len(res.Candidates) == 0 {
		out.Explanation = ex.String()
	}
	return out, nil
}

// PlaceBid signs and gossips a bid, then collects the quotes providers
// send back for req.WaitMillis (default 3 s).
func (n *Node) PlaceBid(ctx context.Context, req api.BidRequest) (api.BidResult, error) {
	wait := time.Duration(req.WaitMillis) * time.Millisecond
	if wait <= 0 {
		wait = defaultBidWait
	}
	if wait > maxBidWait {
		return api.BidResult{}, fault.Fieldf("wait_ms", req.WaitMillis, "at most %d", maxBidWait.Milliseconds())
	}
	start := n.clock.Now()
	b, err := BuildBid(req, n.id, n.swarm, start)
	if err != nil {
		return api.BidResult{}, err
	}
	env, err := market.Sign(n.key, b)
	if err != nil {
		return api.BidResult{}, err
	}
	if err := n.market.PlaceBid(ctx, b); err != nil {
		return api.BidResult{}, err
	}
	quotes, err := n.collectQuotes(ctx, b, env, start.Add(wait))
	if err != nil {
		return api.BidResult{}, err
	}
	out := api.BidResult{BidID: b.Header.Id, Quotes: []api.QuoteView{}}
	for _, q := range quotes {
		out.Quotes = append(out.Quotes, views.Quote(q))
	}
	return out, nil
}

// collectQuotes publishes the registered bid b once the bids topic has a
// mesh, and takes the quotes that came back by until.
func (n *Node) collectQuotes(ctx context.Context, b *pb.Bid, env []byte, until time.Time) ([]*pb.Quote, error) {
	n.link.AwaitMesh(ctx, p2p.TopicBids, n.clock.Until(until))
	err := n.link.Publish(ctx, p2p.TopicBids, env)
	if err == nil {
		select {
		case <-n.clock.After(n.clock.Until(until)):
		case <-ctx.Done():
			err = ctx.Err()
		}
	} else {
		err = fmt.Errorf("publish bid: %w", err)
	}
	quotes, qerr := n.market.TakeQuotes(context.WithoutCancel(ctx), b.Header.Id)
	return quotes, cmp.Or(err, qerr)
}
