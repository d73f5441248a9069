package market

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// bidPlan is what the matcher derives from a bid once per match.
type bidPlan struct {
	bid   *pb.Bid
	nowMs int64
	// unknownRTT is what an unknown RTT counts as in the ranking: the
	// worst this node has measured, at least RTTRef, so a provider no one
	// has measured (or that cannot be reached) is never ranked nearer than
	// one that has been.
	unknownRTT time.Duration
	from       int64  // earliest start, Unix ms: the bid's, or now if later
	until      int64  // latest start, Unix ms
	need       uint32 // fewest GPUs one provider must supply
	want       uint32 // most GPUs one provider may supply
	dur        int64  // lease length in ms
	// split: the bid may be split among providers (a pool), so one
	// provider's several offers may each take part; otherwise Match
	// lists a provider once.
	split bool

	minVRAM, minRAM uint64 // bytes
	minDisk         uint64
	minUp, minDown  uint64 // bits per second
	minCores, minCC uint32
	flags           uint8     // item flags an offer's GPUs must have
	hostMin         bool      // the bid has host minimums
	classes         uint16    // the bid's workload class's classIDs bit (0: none)
	settle          settleKey // the key of the bid's way to pay

	// The bid's models and countries; intern points them at the book's
	// own strings, so comparing them with an offer's is a pointer test.
	// accepts are the models with the memory each entry holds them to;
	// models the distinct names among them.
	accepts                 []gpus.Accept
	models, allowed, denied []string
	query                   Query // the matcher's (WithQuery)
}

func (m *Matcher) plan(bid *pb.Bid, now time.Time) *bidPlan {
	p := &bidPlan{bid: bid, nowMs: now.UnixMilli(), unknownRTT: m.cfg.RTTRef, query: m.query}
	if w, ok := m.rtt.(WorstRTTs); ok {
		p.unknownRTT = max(p.unknownRTT, w.WorstRTT())
	}
	p.from = max(bid.GetEarliestStartUnixMs(), p.nowMs)
	p.until = bid.GetLatestStartUnixMs()
	if p.until == 0 {
		p.until = p.from + m.cfg.StartHorizon.Milliseconds()
	}
	p.need = bid.GetGpu().GetMinPerProvider()
	if p.need == 0 {
		p.need = bid.GetGpu().GetCount()
	}
	p.want = bid.GetGpu().GetCount()
	p.classes = classIDs.bit(bid.GetWorkloadClass())
	p.settle = keyOfSettlement(bid.GetSettlement())
	h := bid.GetHostMin()
	p.hostMin = h.GetCpuCores() != 0 || h.GetRamBytes()|h.GetDiskBytes()|h.GetUpBitsPerSecond()|h.GetDownBitsPerSecond() != 0
	p.split = p.need < p.want
	p.dur = int64(bid.GetDurationSeconds()) * 1000
	req := bid.GetGpu()
	p.minVRAM, p.minRAM, p.minCores, p.minCC = req.GetMinVramBytes(), bid.GetHostMin().GetRamBytes(), bid.GetHostMin().GetCpuCores(), req.GetMinComputeCapability()
	p.minDisk = bid.GetHostMin().GetDiskBytes()
	p.minUp, p.minDown = bid.GetHostMin().GetUpBitsPerSecond(), bid.GetHostMin().GetDownBitsPerSecond()
	if ff, ok := gpus.FormFactorOf(req.GetFormFactor()); ok {
		p.flags |= formFactorFlag(ff)
	}
	if req.GetNvlink() {
		p.flags |= flagNVLink
	}
	p.accepts, p.allowed, p.denied = gpus.Default().Expand(bid.GetGpu().GetModels()), bid.GetRegionsAllowed(), bid.GetRegionsDenied()
	p.models = acceptedModels(p.accepts)
	return p
}

// acceptedModels are the distinct models of as, in order.
func acceptedModels(as []gpus.Accept) []string {
	var out []string
	for _, a := range as {
		if !slices.Contains(out, a.Model) {
			out = append(out, a.Model)
		}
	}
	return out
}

// memoryBound says whether every entry accepting model holds its memory
// to a size: then offers of the model differ by their memory.
func (p *bidPlan) memoryBound(model string) bool {
	bound := false
	for _, a := range p.accepts {
		if a.Model == model {
			if a.MemoryBytes == 0 {
				return false
			}
			bound = true
		}
	}
	return bound
}

// intern replaces the plan's strings by equal ones the snapshot holds.
func (p *bidPlan) intern(s *Snapshot) {
	model := func(m string) (string, bool) {
		if vs := s.byModel[m]; len(vs) > 0 {
			return vs[0].model, true
		}
		return "", false
	}
	country := func(c string) (string, bool) {
		v, ok := s.countries[c]
		return v, ok
	}
	p.accepts = s.kindsOf(p.accepts)
	for i := range p.accepts {
		if m, ok := model(p.accepts[i].Model); ok {
			p.accepts[i].Model = m
		}
	}
	p.models = acceptedModels(p.accepts)
	p.allowed, p.denied = internAll(p.allowed, country), internAll(p.denied, country)
}

func internAll(xs []string, lookup func(string) (string, bool)) []string {
	out := slices.Clone(xs)
	for i, x := range out {
		if y, ok := lookup(x); ok {
			out[i] = y
		}
	}
	return out
}

// evalCtx carries one offer through the checks and scorers for one bid.
// Checks record what they compute (GPUs, start, price, reliability, RTT)
// for the checks and scorers after them.
type evalCtx struct {
	m *Matcher
	p *bidPlan
	// e is the offer's entry and f its facts; o the offer, decoded from
	// e on a check's first call of offer (nil till then).
	e       *offerEntry
	o       *pb.Offer
	f       *offerFacts
	wins    *windowBuf // kept by evaluate from one offer to the next
	issuer  peer.ID
	explain bool   // fill detail when a check fails
	detail  string // this offer's figures for the failed check

	masks    gpuMasks
	supply   uint32 // GPUs of one model the offer has that qualify
	gpus     uint32 // GPUs a lease takes of them
	model    string // the model they are: the first of the largest supply
	rel      float64
	rtt      time.Duration
	rttKnown bool
	rttFrom  RTTSource
	start    int64  // chosen start, Unix ms
	price    uint64 // per GPU-hour in the chosen window
}

// offer is the offer, decoded from its entry on first use: for the
// checks that read what the facts leave out, on the few offers that
// reach them.
func (c *evalCtx) offer() *pb.Offer {
	if c.o == nil {
		c.o = c.e.decode()
	}
	return c.o
}

// windows are the offer's windows, in buffers the context keeps from
// one offer to the next: the decoded offer's, or else read alone from
// the entry's bytes.
func (c *evalCtx) windows() ([]oneOffWindow, []weeklyWindow) {
	if c.wins == nil {
		c.wins = new(windowBuf)
	}
	b := c.wins
	b.oneOff, b.weekly = b.oneOff[:0], b.weekly[:0]
	if c.o == nil {
		b.oneOff, b.weekly = c.e.windows(b.oneOff, b.weekly)
		return b.oneOff, b.weekly
	}
	for _, w := range c.o.GetWindows() {
		b.oneOff = append(b.oneOff, oneOffWindow{w.GetStartUnixMs(), w.GetEndUnixMs(), w.GetFloorMicros()})
	}
	for _, w := range c.o.GetWeekly() {
		b.weekly = append(b.weekly, weeklyWindow{w.GetStartMinute(), w.GetEndMinute(), w.GetFloorMicros()})
	}
	return b.oneOff, b.weekly
}

// windowBuf holds an offer's windows for the search.
type windowBuf struct {
	oneOff []oneOffWindow
	weekly []weeklyWindow
}

// failf records why the offer failed and returns false. Checks call it as
// `return c.explain && c.failf(…)`, so that the figures are formatted
// only when someone asks why: the matcher's hot path never formats.
func (c *evalCtx) failf(format string, a ...any) bool {
	c.detail = fmt.Sprintf(format, a...)
	return false
}

// offerFacts are what the checks read of an offer, flattened out of the
// proto once, when the book stores it, so that rejecting an offer touches
// one object rather than a dozen, and the book need not keep the offer
// decoded. Lists that only a few checks read (windows, workload classes
// the table lacks, image rules) stay in the proto: those checks decode
// it (evalCtx.offer) where the facts say it has them.
type offerFacts struct {
	prices    [4]uint64 // per GPU-hour by pb.Tier; 0 where not offered
	expiresMs int64     // Unix ms
	minDur    uint64    // seconds
	maxDur    uint64
	host      hostFacts
	currency  string
	country   string
	gpus      []gpuFacts
	tiers     uint8 // bit t set if tier t is offered
	withdrawn bool
	gpuStep   uint32 // a lease takes a multiple of it (at least 1)
	gpusWhole bool   // a lease takes every GPU (host.gpus)
	// classes counts the workload classes the offer accepts (any if
	// none); where classKnown, classBits has each one's classIDs bit, so
	// a refusal reads no string.
	classes    uint8
	classBits  uint16
	classKnown bool
	windowed   bool // the offer has one-off or weekly windows
	images     bool // the offer has image rules
	static     bool // the host's address is static
	relayOnly  bool // the provider is reached through relays
	openPorts  uint32
	aheadMs    int64 // how far ahead a lease may start (StartAheadOf)
	// coord is the offer's network coordinate, packed (packCoord; nil:
	// none), for an RTT source that estimates.
	coord []float32
	// settles are the keys of the ways to pay it takes (none: the ledger).
	settles []settleKey
	// datasets are the root CIDs of the datasets its provider keeps.
	datasets []string
}

type hostFacts struct {
	cores               uint32
	ram, disk, up, down uint64
	whole               bool   // every lease gets all of it
	gpus                uint32 // the offer's GPUs, whose shares split it
}

// share is the part of the host a lease of n GPUs gets: all of it, or
// n of its GPUs' shares, rounded down (cores too: a lease is not sold a
// fraction of a core it cannot be held to).
func (h *hostFacts) share(n uint32) hostFacts {
	if h.whole || h.gpus == 0 || n >= h.gpus {
		return *h
	}
	part := func(v uint64) uint64 { return shareOf(v, uint64(n), uint64(h.gpus)) }
	return hostFacts{cores: uint32(part(uint64(h.cores))), ram: part(h.ram), disk: part(h.disk), up: part(h.up), down: part(h.down), gpus: n}
}

type gpuFacts struct {
	model      string
	kind       string // gpus.Catalog.KindOf the model
	count, cc  uint32
	vram       uint64
	formFactor string // the catalog's, or "SXM" for an unknown model on SXM
	nvlink     bool
}

func factsOf(o *pb.Offer) offerFacts {
	h := o.GetHost()
	f := offerFacts{
		expiresMs: o.GetHeader().GetExpiresUnixMs(), minDur: o.GetMinDurationSeconds(), maxDur: o.GetMaxDurationSeconds(),
		host:     hostFacts{cores: h.GetCpuCores(), ram: h.GetRamBytes(), disk: h.GetDiskBytes(), up: h.GetUpBitsPerSecond(), down: h.GetDownBitsPerSecond(), whole: o.GetHostWhole()},
		currency: o.GetCurrency(), country: o.GetRegion().GetCountry(), withdrawn: o.GetWithdrawn(),
		gpuStep: max(o.GetGpuStep(), 1), gpusWhole: o.GetGpusWhole(),
		gpus:     make([]gpuFacts, len(o.GetGpus())),
		classes:  uint8(min(len(o.GetWorkloadClasses()), math.MaxUint8)),
		windowed: len(o.GetWindows()) > 0 || len(o.GetWeekly()) > 0,
		images:   len(o.GetImageAllow())+len(o.GetImageDeny()) > 0,
		static:   o.GetStaticAddress(), relayOnly: o.GetRelayOnly(), openPorts: o.GetOpenPorts(),
		aheadMs: StartAheadOf(o).Milliseconds(),
		coord:   packCoord(o.GetCoordinate()),
	}
	f.classBits, f.classKnown = classIDs.set(o.GetWorkloadClasses())
	if len(o.GetDatasets()) > 0 {
		f.datasets = slices.Clone(o.GetDatasets())
	}
	for _, s := range o.GetSettlements() {
		f.settles = append(f.settles, keyOfSettlement(s))
	}
	cat := gpus.Default()
	for i, g := range o.GetGpus() {
		// Facts name GPUs by catalog ID and hold their marketed memory.
		model := cat.CanonicalFor(g.GetModel(), g.GetVramBytes())
		f.gpus[i] = gpuFacts{model: model, kind: cat.KindOf(model), count: g.GetCount(), cc: g.GetComputeCapability(), vram: cat.MarketedBytes(model, g.GetVramBytes())}
		link := strings.ToLower(g.GetInterconnect())
		if m, ok := cat.Lookup(model); ok {
			f.gpus[i].formFactor, f.gpus[i].nvlink = m.FormFactor, m.NVLink == "yes"
		} else if link == "sxm" {
			f.gpus[i].formFactor = "SXM"
		}
		f.gpus[i].nvlink = f.gpus[i].nvlink || link == "nvlink" || link == "sxm" || link == "nvswitch"
		f.host.gpus += g.GetCount()
	}
	for _, t := range o.GetTiers() {
		if t > pb.Tier_TIER_UNSPECIFIED && t <= pb.Tier_TIER_BRONZE {
			f.tiers |= 1 << t
			f.prices[t] = TierPrice(o, t)
		}
	}
	return f
}

func (f *offerFacts) offers(t pb.Tier) bool { return t >= 0 && t < 8 && f.tiers&(1<<t) != 0 }

// TierPrice is what o asks per GPU-hour in tier t: the first matching
// tier_prices entry, else the base price_micros.
func TierPrice(o *pb.Offer, t pb.Tier) uint64 {
	for _, tp := range o.GetTierPrices() {
		if tp.GetTier() == t {
			return tp.GetMicrosPerGpuHour()
		}
	}
	return o.GetPriceMicros()
}

// A feasCheck is one stage of the feasibility pipeline: fits says whether
// the offer passes (and, when c.explain is set, why not); kind says what a
// failing offer lacks in words that are the same for every offer of one
// bid, which is what Explain counts.
type feasCheck struct {
	name string
	kind func(p *bidPlan) string
	fits func(c *evalCtx) bool
}

// feasibilityChecks is the pipeline, wired once. What the offer is
// comes before what it costs or when it is free, so an explanation says
// "no A100 here" before "too dear": first the checks that hold for a
// whole index bucket (one model in one country), which Explain answers
// per bucket; then the offer's other static terms; then price, and the
// checks that ask outside sources or walk the calendar, on the fewest
// offers.
var feasibilityChecks = [...]feasCheck{
	// The GPU checks narrow the offer's groups step by step.
	{"model", kindModel, fitsModel},
	{"vram", func(p *bidPlan) string { return "vram below " + gpus.ShowMemory(p.bid.GetGpu().GetMinVramBytes()) }, fitsVRAM},
	{"compute", kindCompute, fitsCompute},
	// The offer's country; also an index dimension.
	{"region", func(*bidPlan) string { return "region not allowed" }, fitsRegion},
	{"gpus", func(p *bidPlan) string { return fmt.Sprintf("fewer than %d GPUs", p.need) }, fitsGPUs},
	{"bundle", kindBundle, fitsBundle},
	{"host", func(*bidPlan) string { return "host below minimums" }, fitsHost},
	// A withdrawn or expired offer binds nobody.
	{"live", func(*bidPlan) string { return "expired or withdrawn" }, fitsLive},
	// Prices in different currencies cannot be compared at all.
	{"currency", func(p *bidPlan) string { return "currency not " + p.bid.GetCurrency() }, fitsCurrency},
	// Nor can a renter pay a provider that does not take its money.
	{"settlement", kindSettlement, fitsSettlement},
	// The tier fixes which price applies, so it precedes the price.
	{"tier", func(p *bidPlan) string { return TierName(p.bid.GetTier()) + " tier not offered" }, fitsTier},
	// A bronze lease can be preempted; only a bid that accepts it may take one.
	{"preemption", func(*bidPlan) string { return "bronze is preemptible; bid does not accept preemption" }, fitsPreemption},
	{"duration", kindDuration, fitsDuration},
	{"workload", kindWorkload, fitsWorkload},
	{"image", func(*bidPlan) string { return "image not allowed" }, fitsImage},
	// The index already cuts on price; the check keeps Feasible honest
	// alone.
	{"price", kindPrice, fitsPrice},
	// Exclusion (offenders) overrides every merit; it and the checks
	// after it ask outside sources.
	{"excluded", func(*bidPlan) string { return "provider excluded" }, fitsExcluded},
	{"reliability", kindReliability, fitsReliability},
	// A claimed region the RTTs measured from here make impossible.
	{"claim", func(*bidPlan) string { return "region claim implausible" }, fitsClaim},
	{"rtt", func(p *bidPlan) string { return fmt.Sprintf("rtt above %d ms", p.bid.GetMaxRttMs()) }, fitsRTT},
	// The calendar search walks windows: last, on the fewest offers.
	{"window", kindWindow, fitsWindow},
	// A renter's query reads what every check before it worked out.
	{"where", kindWhere, fitsWhere},
}

func fitsLive(c *evalCtx) bool {
	if c.f.withdrawn {
		return c.explain && c.failf("withdrawn")
	}
	if c.f.expiresMs <= c.p.nowMs {
		return c.explain && c.failf("expired at %s", ms(c.f.expiresMs))
	}
	return true
}

func fitsExcluded(c *evalCtx) bool {
	if c.m.excl != nil && c.m.excl.Excluded(c.issuer) {
		return c.explain && c.failf("provider %s excluded", c.issuer)
	}
	return true
}

func fitsCurrency(c *evalCtx) bool {
	if c.f.currency != c.p.bid.GetCurrency() {
		return c.explain && c.failf("currency %s, bid pays %s", c.f.currency, c.p.bid.GetCurrency())
	}
	return true
}

func fitsTier(c *evalCtx) bool {
	if !c.f.offers(c.p.bid.GetTier()) {
		return c.explain && c.failf("tiers %v; bid wants %s", c.offer().GetTiers(), TierName(c.p.bid.GetTier()))
	}
	return true
}

func fitsPreemption(c *evalCtx) bool {
	if c.p.bid.GetTier() == pb.Tier_TIER_BRONZE && !c.p.bid.GetPreemptionOk() {
		return c.explain && c.failf("bronze only on preemption_ok bids")
	}
	return true
}

func kindPrice(p *bidPlan) string {
	return fmt.Sprintf("%s price above %s", TierName(p.bid.GetTier()), money(p.bid.GetMaxPriceMicros()))
}

func fitsPrice(c *evalCtx) bool {
	c.price = c.f.prices[c.p.bid.GetTier()&3]
	if c.price > c.p.bid.GetMaxPriceMicros() {
		return c.explain && c.failf("%s %s/GPU-h > %s max", TierName(c.p.bid.GetTier()), money(c.price), money(c.p.bid.GetMaxPriceMicros()))
	}
	return true
}

func fitsRegion(c *evalCtx) bool {
	country := c.f.country
	if allowed := c.p.allowed; len(allowed) > 0 && !slices.Contains(allowed, country) {
		return c.explain && c.failf("country %s not in %v", country, allowed)
	}
	if slices.Contains(c.p.denied, country) {
		return c.explain && c.failf("country %s denied", country)
	}
	return true
}

// fitsClaim holds an offer's country to the RTTs measured to its issuer,
// where the bid requires a region and the RTT source can tell.
func fitsClaim(c *evalCtx) bool {
	if v, ok := c.m.rtt.(RegionVerifier); ok && len(c.p.allowed) > 0 {
		if why := v.Implausible(c.issuer, c.f.country); why != "" {
			return c.explain && c.failf("country %s implausible: %s", c.f.country, why)
		}
	}
	return true
}

func kindDuration(p *bidPlan) string {
	return "duration " + seconds(p.bid.GetDurationSeconds()) + " outside the offer's limits"
}

func fitsDuration(c *evalCtx) bool {
	d := c.p.bid.GetDurationSeconds()
	if d < c.f.minDur || d > c.f.maxDur {
		return c.explain && c.failf("duration %s not within %s-%s", seconds(d), seconds(c.f.minDur), seconds(c.f.maxDur))
	}
	return true
}

func kindWorkload(p *bidPlan) string {
	return fmt.Sprintf("workload class %q not accepted", p.bid.GetWorkloadClass())
}

func fitsWorkload(c *evalCtx) bool {
	switch {
	case c.f.classes == 0, c.f.classKnown && c.f.classBits&c.p.classes != 0:
		return true
	case !c.f.classKnown && slices.Contains(c.offer().GetWorkloadClasses(), c.p.bid.GetWorkloadClass()):
		return true
	}
	return c.explain && c.failf("workload class %q not in %v", c.p.bid.GetWorkloadClass(), c.offer().GetWorkloadClasses())
}

// fitsImage applies the offer's rules as prefixes of the raw name: the
// image must start with an allowed prefix (any if there are none) and
// with no denied one. It is a renter's pre-filter: the provider's
// executor decides, on normalised names and image IDs. A bid that names
// no image (a quote) is not filtered.
func fitsImage(c *evalCtx) bool {
	img := c.p.bid.GetImage()
	if img == "" || !c.f.images {
		return true
	}
	if allow := c.offer().GetImageAllow(); len(allow) > 0 && !slices.ContainsFunc(allow, func(p string) bool { return strings.HasPrefix(img, p) }) {
		return c.explain && c.failf("image %q matches no allowed prefix %v", clip(img), allow)
	}
	for _, p := range c.offer().GetImageDeny() {
		if strings.HasPrefix(img, p) {
			return c.explain && c.failf("image %q denied by prefix %q", clip(img), p)
		}
	}
	return true
}

func kindReliability(p *bidPlan) string {
	return fmt.Sprintf("reliability below %.3f", float64(p.bid.GetMinReliabilityPermille())/1000)
}

func fitsReliability(c *evalCtx) bool {
	c.rel = clamp01(c.m.rel.Reliability(c.issuer))
	if min := float64(c.p.bid.GetMinReliabilityPermille()) / 1000; c.rel < min {
		return c.explain && c.failf("reliability %.3f < %.3f required", c.rel, min)
	}
	return true
}

// fitsRTT reads the RTT to the offer's issuer, measured or else
// estimated, and holds it to the bid's limit. An RTT neither measured nor
// estimated fails a limit: a provider must not gain by never being
// measured.
func fitsRTT(c *evalCtx) bool {
	c.rtt, c.rttFrom = rttOf(c.m.rtt, c.issuer, c.f.coord)
	c.rttKnown = c.rttFrom != RTTUnknown
	limit := time.Duration(c.p.bid.GetMaxRttMs()) * time.Millisecond
	switch {
	case limit == 0:
	case !c.rttKnown && c.m.blindRTT:
	case !c.rttKnown:
		return c.explain && c.failf("rtt unknown (neither measured nor estimated); %s allowed", limit)
	case c.rtt > limit:
		return c.explain && c.failf("rtt %s %s > %s allowed", c.rtt.Round(time.Millisecond), c.rttFrom, limit)
	}
	return true
}

func kindWindow(p *bidPlan) string {
	return "no window fits " + seconds(p.bid.GetDurationSeconds()) + " in the start range"
}

// fitsWindow finds the earliest start in the bid's start range at which an
// availability span of the offer covers the whole lease at a floor the bid
// pays. Spans are one-off windows, or weekly windows, each merged where
// they touch (Sunday night into Monday morning); a merged span's floor is
// the highest of its windows'. An offer without windows is available any
// time. It records the start and raises the price to the window's floor.
func fitsWindow(c *evalCtx) bool {
	p := c.p
	if p.until < p.from {
		return c.explain && c.failf("latest start %s has passed", ms(p.until))
	}
	if !c.f.windowed {
		c.start = p.from
		return c.withinAhead()
	}
	oneOff, weekly := c.windows()
	maxPrice := p.bid.GetMaxPriceMicros()
	var blocked bool
	start, floor, found := int64(0), uint64(0), false
	if len(oneOff) > 0 {
		start, floor, found, blocked = earliestFit(&spanIter{oneOff: oneOff}, p, maxPrice)
	}
	if len(weekly) > 0 {
		s, f, ok, b := earliestWeeklyFit(weekly, p, maxPrice)
		blocked = blocked || b
		if ok && (!found || s < start || s == start && f < floor) {
			start, floor, found = s, f, true
		}
	}
	if !found {
		if blocked {
			return c.explain && c.failf("windows that fit %s ask floors above %s", seconds(p.bid.GetDurationSeconds()), money(maxPrice))
		}
		return c.explain && c.failf("no window covers %s starting %s to %s", seconds(p.bid.GetDurationSeconds()), ms(p.from), ms(p.until))
	}
	c.start, c.price = start, max(c.price, floor)
	return c.withinAhead()
}

// withinAhead holds the start found to the offer's bound on how far
// ahead a lease may start. The start is the earliest that fits, so none
// fits within the bound when it lies beyond.
func (c *evalCtx) withinAhead() bool {
	if c.start <= c.p.nowMs+c.f.aheadMs {
		return true
	}
	return c.explain && c.failf("earliest start %s is more than %s ahead, as far as this offer books", ms(c.start), time.Duration(c.f.aheadMs)*time.Millisecond)
}
