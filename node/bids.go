package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Bid defaults and bounds for the API.
const (
	defaultBidWait = 3 * time.Second
	maxBidWait     = time.Minute
	bidTTL         = 10 * time.Minute
	defaultLimit   = 10
	// startSlack is how soon "start now" must start.
	startSlack = 10 * time.Minute
)

// BuildBid turns an API bid request into a wire bid issued by issuer.
// Mistakes in the request come back as api.BadRequest naming the field.
func BuildBid(req api.BidRequest, issuer peer.ID, now time.Time) (*pb.Bid, error) {
	bad := func(format string, a ...any) error { return api.BadRequest{Err: fmt.Errorf(format, a...)} }
	if req.Count < 1 || req.Count > 1024 {
		return nil, bad("count %d: want 1 to 1024", req.Count)
	}
	if !(req.Hours >= 1.0/60 && req.Hours <= 24*366) {
		return nil, bad("hours %g: want 1/60 (a minute) to %d", req.Hours, 24*366)
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"min_vram_gib", req.MinVRAMGiB, 1 << 20}, {"min_per_provider", req.MinPerProvider, req.Count}, {"max_rtt_ms", req.MaxRTTMillis, 60_000}, {"limit", req.Limit, 1000}, {"wait_ms", req.WaitMillis, int(maxBidWait.Milliseconds())}} {
		if f.v < 0 || f.v > f.max {
			return nil, bad("%s %d: want 0 to %d", f.name, f.v, f.max)
		}
	}
	if !(req.StartWithinHours >= 0 && req.StartWithinHours <= 24*366) {
		return nil, bad("start_within_hours %g: want 0 to %d", req.StartWithinHours, 24*366)
	}
	for i, g := range req.GPUs {
		if g == "" || len(g) > 64 {
			return nil, bad("gpus[%d] %q: want a model name such as A100", i, g)
		}
	}
	tierName := req.Tier
	if tierName == "" {
		tierName = "silver"
	}
	tier, err := TierFromName(tierName)
	if err != nil {
		return nil, bad("%v", err)
	}
	maxPrice, err := ParsePrice(req.MaxPrice)
	if err != nil {
		return nil, bad("max_price: %v", err)
	}
	currency := req.Currency
	if currency == "" {
		currency = "USD"
	}
	var cc uint32
	if req.MinCompute != "" {
		if cc, err = ParseComputeCapability(req.MinCompute); err != nil {
			return nil, bad("min_compute_capability: %v", err)
		}
	}
	if req.MinReliability < 0 || req.MinReliability > 1 {
		return nil, bad("min_reliability %g: want 0 to 1", req.MinReliability)
	}
	within := time.Duration(req.StartWithinHours * float64(time.Hour))
	if within < startSlack {
		within = startSlack // "now" leaves the providers a moment to answer
	}
	id := make([]byte, 8)
	rand.Read(id)
	b := &pb.Bid{
		Header: &pb.Header{Version: market.Version, Issuer: []byte(issuer), Id: "bid-" + hex.EncodeToString(id), Seq: 1,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(bidTTL).UnixMilli()},
		Gpu: &pb.GPURequirement{Models: req.GPUs, MinVramBytes: uint64(req.MinVRAMGiB) << 30, MinComputeCapability: cc,
			Count: uint32(req.Count), MinPerProvider: uint32(req.MinPerProvider)},
		Tier: tier, Currency: strings.ToUpper(currency), MaxPriceMicros: maxPrice,
		DurationSeconds:        uint64(math.Ceil(req.Hours * 3600)),
		EarliestStartUnixMs:    now.UnixMilli(),
		LatestStartUnixMs:      now.Add(within).UnixMilli(),
		RegionsAllowed:         upper(req.Regions),
		RegionsDenied:          upper(req.DenyRegions),
		MaxRttMs:               uint32(req.MaxRTTMillis),
		MinReliabilityPermille: uint32(math.Round(req.MinReliability * 1000)),
		PreemptionOk:           req.PreemptionOK || tier == pb.Tier_TIER_BRONZE,
		WorkloadClass:          req.WorkloadClass,
		Image:                  req.Image,
	}
	if err := market.DefaultLimits().ValidateBid(b, now); err != nil {
		return nil, api.BadRequest{Err: err}
	}
	return b, nil
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

// Match ranks the offers in this node's book for a bid, without
// publishing anything; when nothing fits it explains why.
func (n *Node) Match(ctx context.Context, req api.BidRequest) (api.MatchResult, error) {
	now := time.Now()
	b, err := BuildBid(req, n.host.ID(), now)
	if err != nil {
		return api.MatchResult{}, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	snap := n.market.book.Snapshot()
	res := n.market.matcher.Match(snap, b, now, limit)
	out := api.MatchResult{Considered: res.Considered, Feasible: res.Feasible, Candidates: []api.CandidateView{}}
	for i, c := range res.Candidates {
		out.Candidates = append(out.Candidates, candidateView(i+1, c))
	}
	if len(res.Candidates) == 0 {
		out.Explanation = n.market.matcher.Explain(snap, b, now).String()
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
		return api.BidResult{}, api.BadRequest{Err: fmt.Errorf("wait_ms %d: at most %d", req.WaitMillis, maxBidWait.Milliseconds())}
	}
	b, err := BuildBid(req, n.host.ID(), time.Now())
	if err != nil {
		return api.BidResult{}, err
	}
	env, err := market.Sign(n.key, b)
	if err != nil {
		return api.BidResult{}, err
	}
	pend := &pendingBid{bid: b}
	m := n.market
	m.mu.Lock()
	m.pending[b.Header.Id] = pend
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, b.Header.Id)
		m.mu.Unlock()
	}()
	start := time.Now()
	n.awaitMesh(ctx, p2p.TopicBids, wait)
	if err := n.Publish(ctx, p2p.TopicBids, env); err != nil {
		return api.BidResult{}, fmt.Errorf("publish bid: %w", err)
	}
	select {
	case <-time.After(wait - time.Since(start)):
	case <-ctx.Done():
		return api.BidResult{}, ctx.Err()
	}
	out := api.BidResult{BidID: b.Header.Id, Quotes: []api.QuoteView{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	quotes := slices.Clone(pend.quotes)
	slices.SortFunc(quotes, func(a, b *pb.Quote) int { return cmp.Compare(a.PriceMicros, b.PriceMicros) })
	for _, q := range quotes {
		out.Quotes = append(out.Quotes, quoteView(q))
	}
	return out, nil
}

// answers reports whether q is a quote for bid b on b's terms.
func answers(q *pb.Quote, b *pb.Bid) bool {
	return q.BidSeq == b.Header.Seq && q.Tier == b.Tier && q.Currency == b.Currency &&
		q.PriceMicros <= b.MaxPriceMicros && q.DurationSeconds == b.DurationSeconds &&
		q.Gpus >= 1 && q.Gpus <= b.Gpu.GetCount() &&
		q.StartUnixMs >= b.EarliestStartUnixMs && q.StartUnixMs <= b.LatestStartUnixMs
}

// receiveQuote keeps a verified quote that answers one of our open bids.
func (n *Node) receiveQuote(from peer.ID, env []byte) {
	q, err := market.Open[*pb.Quote](env)
	if err == nil {
		err = n.market.limits.ValidateQuote(q, time.Now())
	}
	if err != nil || market.Issuer(q) != from || peer.ID(q.BidIssuer) != n.host.ID() {
		n.log.Debug("quote refused", "from", from, "err", err)
		return
	}
	m := n.market
	m.mu.Lock()
	defer m.mu.Unlock()
	pend, ok := m.pending[q.BidId]
	if !ok || !answers(q, pend.bid) {
		return
	}
	for i, held := range pend.quotes {
		if market.Issuer(held) == from { // one quote per provider: the latest
			pend.quotes[i] = q
			return
		}
	}
	pend.quotes = append(pend.quotes, q)
}
