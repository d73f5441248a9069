package market

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Reliability says how far a provider can be trusted to deliver, from 0
// (never) to 1 (always). Reputation plugs in here; values outside [0, 1]
// are clamped.
type Reliability interface {
	Reliability(p peer.ID) float64
}

// RTTs says the round-trip time measured from this node to a peer, and
// whether one is known at all. Locality plugs in here.
type RTTs interface {
	RTT(p peer.ID) (time.Duration, bool)
}

// RTTEstimator is an RTTs source that also estimates the RTT to an
// offer's issuer it has not measured, from what the offer carries (its
// network coordinate; nil where it carries none). The matcher uses, in
// order, a measured RTT, an estimate, and for neither a pessimistic
// stand-in (see WorstRTTs).
type RTTEstimator interface {
	RTTs
	EstimateRTT(issuer peer.ID, c *pb.NetworkCoordinate) (time.Duration, bool)
}

// RTTOf is the RTT to o's issuer as the matcher takes it: the one src
// measured, else the one it estimates (when it is an RTTEstimator), else
// unknown (0).
func RTTOf(src RTTs, o *pb.Offer) (time.Duration, RTTSource) {
	return rttOf(src, Issuer(o), packCoord(o.GetCoordinate()))
}

// rttOf is RTTOf for an offer whose issuer and packed coordinate the
// caller holds.
func rttOf(src RTTs, issuer peer.ID, coord []float32) (time.Duration, RTTSource) {
	if d, ok := src.RTT(issuer); ok {
		return max(d, 0), RTTMeasured
	}
	if e, ok := src.(RTTEstimator); ok {
		if d, ok := e.EstimateRTT(issuer, unpackCoord(coord)); ok {
			return max(d, 0), RTTEstimated
		}
	}
	return 0, RTTUnknown
}

// packCoord is c as the facts keep it, in single precision (an RTT
// estimate moves by nanoseconds): its vector, then its error, adjustment
// and height; nil for none.
func packCoord(c *pb.NetworkCoordinate) []float32 {
	if c == nil {
		return nil
	}
	out := make([]float32, 0, len(c.GetVec())+3)
	for _, v := range c.GetVec() {
		out = append(out, float32(v))
	}
	// The error rounds up: an estimator that refuses a coordinate above
	// some error refuses it packed too.
	e := float32(c.GetError())
	if float64(e) < c.GetError() {
		e = math.Nextafter32(e, float32(math.Inf(1)))
	}
	return append(out, e, float32(c.GetAdjustment()), float32(c.GetHeight()))
}

// unpackCoord is the coordinate packCoord packed (nil for none).
func unpackCoord(p []float32) *pb.NetworkCoordinate {
	if len(p) < 3 {
		return nil
	}
	n := len(p) - 3
	c := &pb.NetworkCoordinate{Vec: make([]float64, n), Error: float64(p[n]), Adjustment: float64(p[n+1]), Height: float64(p[n+2])}
	for i, v := range p[:n] {
		c.Vec[i] = float64(v)
	}
	return c
}

// RegionVerifier is an RTTs source that also holds an offer's claimed
// country to the RTT it measured to the issuer from where this node is:
// Implausible says why the claim cannot be true, or "" when it can (or
// when the source cannot tell). A bid that requires a region refuses an
// implausible claim.
type RegionVerifier interface {
	Implausible(issuer peer.ID, country string) string
}

// RTTSource says where a candidate's RTT came from.
type RTTSource string

// Sources of an RTT.
const (
	RTTUnknown   RTTSource = "unknown"
	RTTMeasured  RTTSource = "measured"
	RTTEstimated RTTSource = "estimated"
)

// Excluder says which providers the matcher must skip (offenders, later).
type Excluder interface {
	Excluded(p peer.ID) bool
}

// NeutralReliability rates every provider fully reliable: the default
// until reputation exists.
type NeutralReliability struct{}

// Reliability returns 1.
func (NeutralReliability) Reliability(peer.ID) float64 { return 1 }

// WorstRTTs is an RTTs source that also knows the worst RTT it has
// measured: an unknown RTT ranks as that (at least MatchConfig.RTTRef).
type WorstRTTs interface {
	RTTs
	WorstRTT() time.Duration
}

// UnknownRTTs knows no RTT and judges none: every provider ranks at
// RTTRef, and no bid's max_rtt fails. It is for a matcher that cannot know
// the renter's RTT (a provider quoting its own offer); with any other
// source, an RTT neither measured nor estimated fails a max_rtt.
type UnknownRTTs struct{}

// RTT reports every RTT unknown.
func (UnknownRTTs) RTT(peer.ID) (time.Duration, bool) { return 0, false }

// ScoreWeights weigh the scorers in a candidate's combined score, which
// orders candidates of equal effective price.
type ScoreWeights struct {
	Price       float64 // cheaper against the bid's maximum
	Reliability float64 // the provider's reliability
	Latency     float64 // nearer to the renter
	WindowFit   float64 // starting sooner within the bid's start range
}

// Scores are one candidate's scorer values, each in [0, 1], higher better;
// Total is their weighted mean.
type Scores struct {
	Price, Reliability, Latency, WindowFit, Total float64
}

// Candidate is one offer that fits a bid, with the terms it would lease at.
type Candidate struct {
	// offer is the offer, or nil where entry, the book's, holds it
	// undecoded (see Offer).
	offer  *pb.Offer
	entry  *offerEntry
	Issuer peer.ID
	// GPUs this provider supplies: all the bid asks, or fewer (at least
	// its min_per_provider) for the renter to combine; Model is the
	// catalog's name of the model they are.
	GPUs  uint32
	Model string
	// PriceMicros per GPU-hour for the bid's tier, raised to the chosen
	// window's floor.
	PriceMicros uint64
	// EffectivePriceMicros is the ranking key (see the package doc).
	EffectivePriceMicros float64
	// Start is the earliest start the offer's windows allow.
	Start  time.Time
	Scores Scores
	// TotalMicros is PriceMicros × GPUs × duration in hours, rounded up.
	TotalMicros uint64
	// Reliability and RTT are what the sources said about the issuer;
	// RTTSource says whether the RTT was measured or estimated (RTTKnown
	// then) or is unknown.
	Reliability float64
	RTT         time.Duration
	RTTKnown    bool
	RTTSource   RTTSource
	// Staging is what the provider would stage of the bid's datasets;
	// its time at the price is in the effective price.
	Staging Staging
}

// ScoreMap returns the scores by name, for display and JSON.
func (c Candidate) ScoreMap() map[string]float64 {
	return map[string]float64{
		"price": c.Scores.Price, "reliability": c.Scores.Reliability,
		"latency": c.Scores.Latency, "window_fit": c.Scores.WindowFit, "total": c.Scores.Total,
	}
}

// compareCandidates ranks by effective price, then combined score
// (higher first), then issuer and offer id: a total order.
func compareCandidates(a, b *Candidate) int {
	if c := cmp.Compare(a.EffectivePriceMicros, b.EffectivePriceMicros); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Scores.Total, a.Scores.Total); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Issuer, b.Issuer); c != 0 {
		return c
	}
	return cmp.Compare(a.OfferID(), b.OfferID())
}

// Offer is the candidate's offer (nil for the zero Candidate). A match
// leaves the book's offers encoded, as a ranking reads only their facts,
// and each call decodes a copy, the caller's own; a caller that reads it
// often keeps one (Decoded). A candidate given its offer (WithOffer,
// Feasible, or one whose checks decoded it) returns that one, shared.
func (c Candidate) Offer() *pb.Offer {
	if c.offer != nil || c.entry == nil {
		return c.offer
	}
	return c.entry.decode()
}

// Decoded is c with its offer decoded once, for a caller that reads it
// many times.
func (c Candidate) Decoded() Candidate { return c.WithOffer(c.Offer()) }

// WithOffer is c with o for its offer: for a candidate made by hand.
func (c Candidate) WithOffer(o *pb.Offer) Candidate {
	c.offer, c.entry = o, nil
	return c
}

// OfferID is the ID of the candidate's offer, read without decoding it.
func (c Candidate) OfferID() string {
	if c.entry != nil {
		return c.entry.key.id
	}
	return c.offer.GetHeader().GetId()
}

// insertRanked inserts c into the ranked list cs, keeping at most k (all
// if k ≤ 0).
func insertRanked(cs []Candidate, c Candidate, k int) []Candidate {
	i := sort.Search(len(cs), func(i int) bool { return compareCandidates(&cs[i], &c) > 0 })
	if k > 0 && i >= k {
		return cs
	}
	if k > 0 && len(cs) == k {
		cs = cs[:k-1]
	}
	return slices.Insert(cs, i, c)
}

// MatchConfig tunes the matcher; see the package doc for the formula.
type MatchConfig struct {
	// Alpha is how much a reliability shortfall raises the effective
	// price: at Alpha 1, reliability 0.9 costs 10% more. Default 1.
	Alpha float64
	// Beta is how much latency raises it: at Beta 0.5, an RTT of RTTRef
	// costs 50% more. Default 0.5.
	Beta float64
	// RTTRef is the RTT that costs Beta in full. Default 100 ms.
	RTTRef time.Duration
	// Weights of the combined score. Default price 0.4, reliability 0.3,
	// latency 0.2, window fit 0.1.
	Weights ScoreWeights
	// StartHorizon is how long after its earliest start a bid without a
	// latest start may begin. Default 7 days.
	StartHorizon time.Duration
}

// DefaultMatchConfig returns the documented defaults.
func DefaultMatchConfig() MatchConfig {
	return MatchConfig{
		Alpha:        1,
		Beta:         0.5,
		RTTRef:       100 * time.Millisecond,
		Weights:      ScoreWeights{Price: 0.4, Reliability: 0.3, Latency: 0.2, WindowFit: 0.1},
		StartHorizon: 7 * 24 * time.Hour,
	}
}

// Validate names the first field out of its allowed range.
func (c MatchConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"alpha", c.Alpha}, {"beta", c.Beta},
		{"weights.price", c.Weights.Price}, {"weights.reliability", c.Weights.Reliability},
		{"weights.latency", c.Weights.Latency}, {"weights.window_fit", c.Weights.WindowFit},
	} {
		if !(f.v >= 0 && f.v <= 100) {
			return fmt.Errorf("match config: %s = %v; want 0 to 100", f.name, f.v)
		}
	}
	if c.RTTRef <= 0 || c.RTTRef > time.Minute {
		return fmt.Errorf("match config: rtt_ref = %s; want over 0 up to 1m", c.RTTRef)
	}
	if c.StartHorizon <= 0 || c.StartHorizon > 366*24*time.Hour {
		return fmt.Errorf("match config: start_horizon = %s; want over 0 up to 366 days", c.StartHorizon)
	}
	return nil
}

// sanitized replaces every field that fails Validate by its default, so
// the ranking's guarantees (effective price ≥ price) always hold.
func (c MatchConfig) sanitized() MatchConfig {
	d := DefaultMatchConfig()
	ok := func(v float64) bool { return v >= 0 && v <= 100 }
	for _, f := range []struct{ v, def *float64 }{
		{&c.Alpha, &d.Alpha}, {&c.Beta, &d.Beta},
		{&c.Weights.Price, &d.Weights.Price}, {&c.Weights.Reliability, &d.Weights.Reliability},
		{&c.Weights.Latency, &d.Weights.Latency}, {&c.Weights.WindowFit, &d.Weights.WindowFit},
	} {
		if !ok(*f.v) {
			*f.v = *f.def
		}
	}
	if c.RTTRef <= 0 || c.RTTRef > time.Minute {
		c.RTTRef = d.RTTRef
	}
	if c.StartHorizon <= 0 || c.StartHorizon > 366*24*time.Hour {
		c.StartHorizon = d.StartHorizon
	}
	return c
}

// effectivePrice is the reverse auction's ranking key, per GPU-hour:
// price × (1 + α·(1 − reliability)) × (1 + β·rtt/rttRef), rtt being the
// one a ranking uses (evalCtx.rankRTT). It is never below price.
func (c MatchConfig) effectivePrice(price uint64, rel float64, rtt time.Duration) float64 {
	eff := float64(price) * (1 + c.Alpha*(1-clamp01(rel)))
	if rtt > 0 {
		eff *= 1 + c.Beta*float64(rtt)/float64(c.RTTRef)
	}
	return eff
}

// rankRTT is the RTT the ranking uses: the one known, or the plan's
// pessimistic stand-in for an unknown one.
func (c *evalCtx) rankRTT() time.Duration {
	if c.rttKnown {
		return c.rtt
	}
	return c.p.unknownRTT
}

// priceScore is 1 for a free offer, 0 at the bid's maximum.
func priceScore(price, maxPrice uint64) float64 {
	if maxPrice == 0 {
		return 0
	}
	return clamp01(1 - float64(price)/float64(maxPrice))
}

// latencyScore is rttRef/(rttRef+rtt): 1 at no latency, ½ at rttRef.
func latencyScore(rtt, ref time.Duration) float64 {
	if rtt <= 0 {
		return 1
	}
	return float64(ref) / float64(ref+rtt)
}

// windowFitScore is 1 for a start at the earliest the bid allows, falling
// linearly to 0 at its latest start.
func windowFitScore(start, from, until int64) float64 {
	if until <= from {
		return 1
	}
	return clamp01(1 - float64(start-from)/float64(until-from))
}

// total is the weighted mean of the scores; 0 when every weight is 0.
func (w ScoreWeights) total(s Scores) float64 {
	sum := w.Price + w.Reliability + w.Latency + w.WindowFit
	if sum == 0 {
		return 0
	}
	return clamp01((w.Price*s.Price + w.Reliability*s.Reliability + w.Latency*s.Latency + w.WindowFit*s.WindowFit) / sum)
}

// score runs every scorer on a feasible offer.
func (m *Matcher) score(c *evalCtx) Scores {
	s := Scores{
		Price:       priceScore(c.price, c.p.bid.GetMaxPriceMicros()),
		Reliability: c.rel,
		Latency:     latencyScore(c.rankRTT(), m.cfg.RTTRef),
		WindowFit:   windowFitScore(c.start, c.p.from, c.p.until),
	}
	s.Total = m.cfg.Weights.total(s)
	return s
}

// LeaseTotal is price × gpus × seconds / 3600 in micro-units, rounded up,
// in 128-bit integer arithmetic; it saturates at the largest uint64.
func LeaseTotal(price uint64, gpus uint32, secs uint64) uint64 {
	hi, lo := bits.Mul64(price, uint64(gpus))
	if hi != 0 {
		return math.MaxUint64
	}
	hi, lo = bits.Mul64(lo, secs)
	lo, carry := bits.Add64(lo, 3599, 0)
	hi += carry
	if hi >= 3600 {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, 3600)
	return q
}

// Words and figures for reasons.

// gib renders bytes as GiB, with a fraction only where there is one.
func gib(b uint64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", b>>30)
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

// money renders micro-units as units with up to six decimals.
func money(micros uint64) string {
	s := fmt.Sprintf("%d.%06d", micros/1e6, micros%1e6)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func computeCap(cc uint32) string { return fmt.Sprintf("%d.%d", cc/10, cc%10) }

func seconds(s uint64) string { return (time.Duration(s) * time.Second).String() }

func offerModels(o *pb.Offer) string {
	var ms []string
	for _, g := range o.GetGpus() {
		ms = append(ms, g.GetModel())
	}
	return strings.Join(ms, ", ")
}

func clamp01(x float64) float64 {
	if !(x >= 0) { // also NaN
		return 0
	}
	return min(x, 1)
}

// Availability search: the window check's walk over an offer's windows,
// which also finds the start the window-fit scorer rates.

const (
	weekMs = 7 * 24 * 3600 * 1000
	// firstMondayMs is 1970-01-05T00:00Z: weekly windows count from Mondays.
	firstMondayMs = 4 * 24 * 3600 * 1000
)

// earliestWeeklyFit searches weekly windows. Their spans repeat weekly and,
// unless they cover the whole week, last under a week; so the spans that
// start within a week after p.from, walked from the week before p.from's
// to three weeks after it, hold the earliest fit if there is one.
func earliestWeeklyFit(ws []weeklyWindow, p *bidPlan, maxPrice uint64) (start int64, floor uint64, found, blocked bool) {
	var covered uint32
	for _, w := range ws {
		covered += w.end - min(w.start, w.end)
		floor = max(floor, w.floor)
	}
	if covered >= minutesPerWeek { // always available
		if floor > maxPrice {
			return 0, 0, false, true
		}
		return p.from, floor, true, false
	}
	week := p.from - (p.from-firstMondayMs)%weekMs
	if (p.from-firstMondayMs)%weekMs < 0 {
		week -= weekMs
	}
	return earliestFit(&spanIter{weekly: ws, week: week - weekMs, weeks: 5}, p, maxPrice)
}

// earliestFit walks spans in time order to the first that holds the lease
// at a start in the bid's range and a floor within maxPrice. blocked says
// a span was long enough but asked too high a floor.
func earliestFit(it *spanIter, p *bidPlan, maxPrice uint64) (start int64, floor uint64, found, blocked bool) {
	for {
		s, ok := it.span()
		if !ok || s.start > p.until {
			return 0, 0, false, blocked
		}
		st := max(s.start, p.from)
		if st > p.until || st+p.dur > s.end {
			continue
		}
		if s.floor > maxPrice {
			blocked = true
			continue
		}
		return st, s.floor, true, blocked
	}
}

// availSpan is a stretch of availability [start, end) in Unix ms with the
// highest floor of the windows it joins.
type availSpan struct {
	start, end int64
	floor      uint64
}

// oneOffWindow is a pb.Interval as the search reads it: Unix ms, and
// the floor per GPU-hour.
type oneOffWindow struct {
	start, end int64
	floor      uint64
}

// weeklyWindow is a pb.WeeklyWindow as the search reads it: minutes
// since Monday 00:00 UTC, and the floor.
type weeklyWindow struct {
	start, end uint32
	floor      uint64
}

// spanIter yields an offer's windows as merged spans in time order,
// without allocating: one-off windows as given, or weekly windows
// repeated for a number of weeks.
type spanIter struct {
	oneOff  []oneOffWindow
	weekly  []weeklyWindow
	i       int   // next window
	week    int64 // Unix ms of the Monday of the week being walked
	weeks   int   // weeks left to walk, this one included
	pending availSpan
	held    bool // pending is valid
}

func (it *spanIter) raw() (availSpan, bool) {
	if it.oneOff != nil {
		if it.i >= len(it.oneOff) {
			return availSpan{}, false
		}
		w := it.oneOff[it.i]
		it.i++
		return availSpan(w), true
	}
	for it.weeks > 0 {
		if it.i < len(it.weekly) {
			w := it.weekly[it.i]
			it.i++
			return availSpan{it.week + int64(w.start)*60_000, it.week + int64(w.end)*60_000, w.floor}, true
		}
		it.i, it.week, it.weeks = 0, it.week+weekMs, it.weeks-1
	}
	return availSpan{}, false
}

// span returns the next span: raw windows that touch are joined.
func (it *spanIter) span() (availSpan, bool) {
	cur, ok := it.pending, it.held
	if !ok {
		if cur, ok = it.raw(); !ok {
			return availSpan{}, false
		}
	}
	it.held = false
	for {
		next, ok := it.raw()
		if !ok {
			return cur, true
		}
		if next.start > cur.end {
			it.pending, it.held = next, true
			return cur, true
		}
		cur.end, cur.floor = max(cur.end, next.end), max(cur.floor, next.floor)
	}
}
