package market

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Version is the wire version this package writes and accepts.
const Version = 1

// Limits bound what a valid message may say. Every node applies the same
// limits, so what one accepts the others accept.
type Limits struct {
	// MaxHorizon is how far ahead of now a message may expire.
	MaxHorizon time.Duration
	// ClockSkew is how far a message's creation time may lie ahead of now.
	ClockSkew time.Duration
	// MinPriceMicros and MaxPriceMicros bound every price per GPU-hour.
	MinPriceMicros, MaxPriceMicros uint64
	// MaxGPUGroups, MaxGPUsPerGroup, MaxWindows and MaxListLen bound the
	// repeated fields.
	MaxGPUGroups, MaxGPUsPerGroup, MaxWindows, MaxListLen int
	// MaxStringLen bounds every string.
	MaxStringLen int
	// MaxDuration bounds lease durations.
	MaxDuration time.Duration
	// Swarm is the swarm every message must name (Header.swarm): the
	// node's own; empty for the public swarm.
	Swarm string
}

// DefaultLimits are what every node uses unless configured otherwise:
// offers live at most 24 h, clocks may disagree by 30 s, prices lie
// between 0.001 and 10 000 currency units per GPU-hour.
func DefaultLimits() Limits {
	return Limits{
		MaxHorizon:      24 * time.Hour,
		ClockSkew:       30 * time.Second,
		MinPriceMicros:  1_000,
		MaxPriceMicros:  10_000_000_000,
		MaxGPUGroups:    16,
		MaxGPUsPerGroup: 64,
		MaxWindows:      64,
		MaxListLen:      32,
		MaxStringLen:    256,
		MaxDuration:     366 * 24 * time.Hour,
	}
}

// Character classes of IDs, country and currency codes, checked by hand:
// they run on every gossiped message, where a regexp costs more than the
// rest of the validation together.
var (
	idChars = charClass{min: 1, max: 64, ok: func(c byte) bool {
		return isUpper(c) || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}}
	countryCode  = charClass{min: 2, max: 2, ok: isUpper}
	currencyCode = charClass{min: 3, max: 5, ok: isUpper}
)

// idRule says what an ID may be, for messages.
const idRule = "want 1-64 of A-Z a-z 0-9 . _ : -, not dots alone"

// validID reports whether s may be an ID: of the ID alphabet and not "."
// or "..", which a path (a datastore key, a file name) would collapse.
func validID(s string) bool { return idChars.MatchString(s) && strings.Trim(s, ".") != "" }

// KeyPart is id as one element of a datastore key path: the ID alphabet
// passes through but for '.', which is %-escaped with every other byte,
// so no string read off the wire can name a key's parent, itself, or
// several elements.
func KeyPart(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		if c := id[i]; c != '.' && idChars.ok(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

// charClass matches strings of min to max bytes, each passing ok.
type charClass struct {
	min, max int
	ok       func(byte) bool
}

// MatchString reports whether s is in the class.
func (c charClass) MatchString(s string) bool {
	if len(s) < c.min || len(s) > c.max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !c.ok(s[i]) {
			return false
		}
	}
	return true
}

// swarmName shows a swarm ID, the public swarm's included.
func swarmName(id string) string {
	if id == "" {
		return "the public swarm"
	}
	return "swarm " + strconv.Quote(clip(id))
}

// minutesPerWeek bounds weekly windows.
const minutesPerWeek = 7 * 24 * 60

func (l Limits) header(h *pb.Header, now time.Time) error {
	if h == nil {
		return invalid("header", "missing")
	}
	if h.Version != Version {
		return invalid("header.version", "%d; this node speaks version %d", h.Version, Version)
	}
	if _, err := peer.IDFromBytes(h.Issuer); err != nil {
		return invalid("header.issuer", "not a peer ID")
	}
	if !validID(h.Id) {
		return invalid("header.id", "%q; %s", clip(h.Id), idRule)
	}
	if h.Seq == 0 {
		return invalid("header.seq", "0; sequence numbers start at 1")
	}
	if h.Swarm != l.Swarm {
		return invalid("header.swarm", "%s; this node is in %s", swarmName(h.Swarm), swarmName(l.Swarm))
	}
	nowMs := now.UnixMilli()
	if h.CreatedUnixMs > nowMs+l.ClockSkew.Milliseconds() {
		return fmt.Errorf("%w: header.created_unix_ms %s is more than %s ahead of this node's clock", ErrFuture, ms(h.CreatedUnixMs), l.ClockSkew)
	}
	if h.ExpiresUnixMs <= h.CreatedUnixMs {
		return invalid("header.expires_unix_ms", "%s is not after created %s", ms(h.ExpiresUnixMs), ms(h.CreatedUnixMs))
	}
	if h.ExpiresUnixMs <= nowMs {
		return fmt.Errorf("%w at %s", ErrExpired, ms(h.ExpiresUnixMs))
	}
	if h.ExpiresUnixMs > nowMs+l.MaxHorizon.Milliseconds() {
		return invalid("header.expires_unix_ms", "%s is more than %s ahead", ms(h.ExpiresUnixMs), l.MaxHorizon)
	}
	return nil
}

func (l Limits) price(field string, v uint64) error {
	if v < l.MinPriceMicros || v > l.MaxPriceMicros {
		return invalid(field, "%d micros; want %d to %d", v, l.MinPriceMicros, l.MaxPriceMicros)
	}
	return nil
}

func (l Limits) str(field, s string) error {
	if len(s) > l.MaxStringLen {
		return invalid(field, "%d bytes; limit %d", len(s), l.MaxStringLen)
	}
	return nil
}

func (l Limits) strs(field string, ss []string) error {
	if len(ss) > l.MaxListLen {
		return invalid(field, "%d entries; limit %d", len(ss), l.MaxListLen)
	}
	for i, s := range ss {
		if err := l.str(indexed(field, i), s); err != nil {
			return err
		}
	}
	return nil
}

// ValidateOffer checks an offer's content at now; the first problem is
// returned as a *FieldError.
func (l Limits) ValidateOffer(o *pb.Offer, now time.Time) error {
	if err := l.header(o.Header, now); err != nil {
		return err
	}
	if o.Withdrawn {
		return nil // a withdrawal needs only a valid header
	}
	if err := l.offerGPUs(o); err != nil {
		return err
	}
	if err := l.offerPrices(o); err != nil {
		return err
	}
	return l.offerTerms(o)
}

// offerGPUs checks an offer's GPU groups.
func (l Limits) offerGPUs(o *pb.Offer) error {
	if len(o.Gpus) == 0 || len(o.Gpus) > l.MaxGPUGroups {
		return invalid("gpus", "%d groups; want 1 to %d", len(o.Gpus), l.MaxGPUGroups)
	}
	for i, g := range o.Gpus {
		f := indexed("gpus", i)
		switch {
		case g.Model == "" || len(g.Model) > 64:
			return invalid(f+".model", "%q; want 1-64 bytes", clip(g.Model))
		case g.Count == 0 || int(g.Count) > l.MaxGPUsPerGroup:
			return invalid(f+".count", "%d; want 1 to %d", g.Count, l.MaxGPUsPerGroup)
		case g.VramBytes == 0:
			return invalid(f+".vram_bytes", "0; want the GPU's memory in bytes")
		case g.ComputeCapability == 0 || g.ComputeCapability > 200:
			return invalid(f+".compute_capability", "%d; want major*10+minor, such as 90", g.ComputeCapability)
		case g.CudaVersion > 9999:
			return invalid(f+".cuda_version", "%d; want major*100+minor, such as 1204 (0: unknown)", g.CudaVersion)
		case g.PcieGeneration > 16 || g.PcieLanes > 64:
			return invalid(f+".pcie_generation", "generation %d, %d lanes; want at most 16 and 64 (0: unknown)", g.PcieGeneration, g.PcieLanes)
		case g.MemoryBandwidthGbps > 1_000_000 || g.Fp32Gflops > 100_000_000:
			return invalid(f+".memory_bandwidth_gbps", "%d GB/s, %d GFLOPS; want at most 1000000 and 100000000 (0: unknown)", g.MemoryBandwidthGbps, g.Fp32Gflops)
		case len(g.DriverVersion) > 32 || strings.Trim(g.DriverVersion, "0123456789.") != "":
			return invalid(f+".driver_version", "%q; want digits and dots, at most 32, such as 550.54.15", clip(g.DriverVersion))
		}
		if err := l.str(f+".interconnect", g.Interconnect); err != nil {
			return err
		}
	}
	return nil
}

// offerPrices checks where an offer is and what it asks: region,
// currency, its price and tier prices.
func (l Limits) offerPrices(o *pb.Offer) error {
	if o.OpenPorts > 65535 {
		return invalid("open_ports", "%d; want at most 65535", o.OpenPorts)
	}
	if o.Region == nil || !countryCode.MatchString(o.Region.Country) {
		return invalid("region.country", "%q; want an ISO 3166 code such as DE", clip(o.Region.GetCountry()))
	}
	if err := l.str("region.label", o.Region.Label); err != nil {
		return err
	}
	if !currencyCode.MatchString(o.Currency) {
		return invalid("currency", "%q; want a code such as USD", clip(o.Currency))
	}
	if err := l.price("price_micros", o.PriceMicros); err != nil {
		return err
	}
	for i, tp := range o.TierPrices {
		if tp.Tier < pb.Tier_TIER_GOLD || tp.Tier > pb.Tier_TIER_BRONZE {
			return invalid(indexed("tier_prices", i)+".tier", "%v", tp.Tier)
		}
		if err := l.price(indexed("tier_prices", i)+".micros_per_gpu_hour", tp.MicrosPerGpuHour); err != nil {
			return err
		}
	}
	return nil
}

// offerTerms checks what an offer's leases may be: durations, how far
// ahead they start, GPU steps, windows, tiers, workloads and images, and
// its attestation hash and coordinate.
func (l Limits) offerTerms(o *pb.Offer) error {
	if err := l.durations(o.MinDurationSeconds, o.MaxDurationSeconds); err != nil {
		return err
	}
	if s := o.MaxStartAheadSeconds; s > uint64(MaxStartAhead.Seconds()) {
		return invalid("max_start_ahead_seconds", "%d; want 0 (the default, %s) to %d", s, DefaultStartAhead, uint64(MaxStartAhead.Seconds()))
	}
	if o.GpuStep > MaxGPUStep {
		return invalid("gpu_step", "%d; want 0 or 1 (any count) to %d", o.GpuStep, MaxGPUStep)
	}
	if err := l.windows(o); err != nil {
		return err
	}
	if len(o.Tiers) == 0 || len(o.Tiers) > 3 {
		return invalid("tiers", "%d tiers; want 1 to 3", len(o.Tiers))
	}
	for i, t := range o.Tiers {
		if t < pb.Tier_TIER_GOLD || t > pb.Tier_TIER_BRONZE {
			return invalid(indexed("tiers", i), "%v", t)
		}
		if t == pb.Tier_TIER_BRONZE && o.BronzeNoticeSeconds == 0 {
			return invalid("bronze_notice_seconds", "0; a bronze tier needs a notice period")
		}
	}
	for _, f := range []struct {
		name string
		v    []string
	}{{"workload_classes", o.WorkloadClasses}, {"image_allow", o.ImageAllow}, {"image_deny", o.ImageDeny}} {
		if err := l.strs(f.name, f.v); err != nil {
			return err
		}
	}
	if err := offerSettlements(o); err != nil {
		return err
	}
	if len(o.AttestationHash) > 64 {
		return invalid("attestation_hash", "%d bytes; limit 64", len(o.AttestationHash))
	}
	if len(o.Datasets) > MaxOfferDatasets {
		return invalid("datasets", "%d; at most %d", len(o.Datasets), MaxOfferDatasets)
	}
	for i, c := range o.Datasets {
		if !validDatasetCID(c) {
			return invalid(indexed("datasets", i), "%q; want a dataset's CIDv1 (bafy…)", clip(c))
		}
	}
	if c := o.Coordinate; c != nil {
		if err := CheckCoordinate(c); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = "coordinate." + fe.Field
			}
			return err
		}
	}
	return nil
}

// Network coordinates (Vivaldi, as hashicorp/serf computes them): CoordDims
// dimensions in seconds, each within ±MaxCoordSeconds, an error estimate
// from 0 to MaxCoordError, an adjustment within ±MaxCoordSeconds and a
// height from 0 to MaxCoordSeconds. Real ones sit far inside: the
// Earth's far side is 0.2 s away.
const (
	CoordDims       = 8
	MaxCoordSeconds = 10.0
	MaxCoordError   = 1.5
)

// CheckCoordinate checks a network coordinate's shape and bounds.
func CheckCoordinate(c *pb.NetworkCoordinate) error {
	if len(c.Vec) != CoordDims {
		return invalid("vec", "%d dimensions; want %d", len(c.Vec), CoordDims)
	}
	for i, v := range c.Vec {
		if !(math.Abs(v) <= MaxCoordSeconds) { // NaN fails too
			return invalid(indexed("vec", i), "%g; want within ±%g", v, MaxCoordSeconds)
		}
	}
	switch {
	case !(c.Error >= 0 && c.Error <= MaxCoordError):
		return invalid("error", "%g; want 0 to %g", c.Error, MaxCoordError)
	case !(math.Abs(c.Adjustment) <= MaxCoordSeconds):
		return invalid("adjustment", "%g; want within ±%g", c.Adjustment, MaxCoordSeconds)
	case !(c.Height >= 0 && c.Height <= MaxCoordSeconds):
		return invalid("height", "%g; want 0 to %g", c.Height, MaxCoordSeconds)
	}
	return nil
}

func (l Limits) durations(lo, hi uint64) error {
	max := uint64(l.MaxDuration.Seconds())
	if lo == 0 || lo > max {
		return invalid("min_duration_seconds", "%d; want 1 to %d", lo, max)
	}
	if hi < lo || hi > max {
		return invalid("max_duration_seconds", "%d; want %d to %d", hi, lo, max)
	}
	return nil
}

// windows checks that one-off windows are ordered and do not overlap, and
// that weekly windows lie within the week, ordered and apart.
func (l Limits) windows(o *pb.Offer) error {
	if len(o.Windows)+len(o.Weekly) > l.MaxWindows {
		return invalid("windows", "%d windows; limit %d", len(o.Windows)+len(o.Weekly), l.MaxWindows)
	}
	var prevEnd int64
	for i, w := range o.Windows {
		f := indexed("windows", i)
		if w.EndUnixMs <= w.StartUnixMs {
			return invalid(f, "ends at %s, not after its start %s", ms(w.EndUnixMs), ms(w.StartUnixMs))
		}
		if i > 0 && w.StartUnixMs < prevEnd {
			return invalid(f, "starts at %s, before the previous window ends (%s): windows must be ordered and apart", ms(w.StartUnixMs), ms(prevEnd))
		}
		if w.FloorMicros != 0 {
			if err := l.price(f+".floor_micros", w.FloorMicros); err != nil {
				return err
			}
		}
		prevEnd = w.EndUnixMs
	}
	var prevMin uint32
	for i, w := range o.Weekly {
		f := indexed("weekly", i)
		if w.EndMinute <= w.StartMinute || w.EndMinute > minutesPerWeek {
			return invalid(f, "minutes %d-%d; want start < end <= %d", w.StartMinute, w.EndMinute, minutesPerWeek)
		}
		if i > 0 && w.StartMinute < prevMin {
			return invalid(f, "starts at minute %d, before the previous window ends (%d)", w.StartMinute, prevMin)
		}
		if w.FloorMicros != 0 {
			if err := l.price(f+".floor_micros", w.FloorMicros); err != nil {
				return err
			}
		}
		prevMin = w.EndMinute
	}
	return nil
}

// MaxGPUStep bounds Offer.gpu_step: a lease takes at most a machine.
const MaxGPUStep = 64

// ValidateBid checks a bid's content at now.
func (l Limits) ValidateBid(b *pb.Bid, now time.Time) error {
	if err := l.header(b.Header, now); err != nil {
		return err
	}
	g := b.Gpu
	if g == nil || g.Count == 0 || int(g.Count) > l.MaxGPUsPerGroup*l.MaxGPUGroups {
		return invalid("gpu.count", "%d; want 1 to %d", g.GetCount(), l.MaxGPUsPerGroup*l.MaxGPUGroups)
	}
	if g.MinPerProvider > g.Count {
		return invalid("gpu.min_per_provider", "%d is more than gpu.count %d", g.MinPerProvider, g.Count)
	}
	if err := l.strs("gpu.models", g.Models); err != nil {
		return err
	}
	if _, ok := gpus.FormFactorOf(g.FormFactor); g.FormFactor != "" && !ok {
		return invalid("gpu.form_factor", "%q; want one of %s", clip(g.FormFactor), strings.Join(gpus.FormFactors, ", "))
	}
	if b.Tier < pb.Tier_TIER_GOLD || b.Tier > pb.Tier_TIER_BRONZE {
		return invalid("tier", "%v; want gold, silver or bronze", b.Tier)
	}
	if !currencyCode.MatchString(b.Currency) {
		return invalid("currency", "%q; want a code such as USD", clip(b.Currency))
	}
	if err := l.price("max_price_micros", b.MaxPriceMicros); err != nil {
		return err
	}
	if b.DurationSeconds == 0 || b.DurationSeconds > uint64(l.MaxDuration.Seconds()) {
		return invalid("duration_seconds", "%d; want 1 to %d", b.DurationSeconds, uint64(l.MaxDuration.Seconds()))
	}
	if b.LatestStartUnixMs != 0 && b.LatestStartUnixMs < b.EarliestStartUnixMs {
		return invalid("latest_start_unix_ms", "%s is before earliest start %s", ms(b.LatestStartUnixMs), ms(b.EarliestStartUnixMs))
	}
	for _, f := range []struct {
		name string
		v    []string
	}{{"regions_allowed", b.RegionsAllowed}, {"regions_denied", b.RegionsDenied}} {
		if err := l.strs(f.name, f.v); err != nil {
			return err
		}
		for i, c := range f.v {
			if !countryCode.MatchString(c) {
				return invalid(indexed(f.name, i), "%q; want an ISO 3166 code such as DE", clip(c))
			}
		}
	}
	if b.MinReliabilityPermille > 1000 {
		return invalid("min_reliability_permille", "%d; want 0 to 1000", b.MinReliabilityPermille)
	}
	if err := l.str("workload_class", b.WorkloadClass); err != nil {
		return err
	}
	if b.Settlement != nil {
		if err := checkSettlement("settlement", b.Settlement, false); err != nil {
			return err
		}
	}
	if len(b.Datasets) > MaxDatasets {
		return invalid("datasets", "%d; at most %d", len(b.Datasets), MaxDatasets)
	}
	for i, d := range b.Datasets {
		if !validDatasetCID(d.GetCid()) {
			return invalid(indexed("datasets", i)+".cid", "%q; want a dataset's CIDv1 (bafy…)", clip(d.GetCid()))
		}
		if d.GetBytes() == 0 || d.GetBytes() > MaxDatasetBytes {
			return invalid(indexed("datasets", i)+".bytes", "%d; want 1 to %d", d.GetBytes(), uint64(MaxDatasetBytes))
		}
	}
	return l.str("image", b.Image)
}

// ValidateQuote checks a quote's content at now.
func (l Limits) ValidateQuote(q *pb.Quote, now time.Time) error {
	if err := l.header(q.Header, now); err != nil {
		return err
	}
	if _, err := peer.IDFromBytes(q.BidIssuer); err != nil {
		return invalid("bid_issuer", "not a peer ID")
	}
	if !validID(q.BidId) || !validID(q.OfferId) {
		return invalid("bid_id", "bid and offer IDs: %s", idRule)
	}
	if q.Tier < pb.Tier_TIER_GOLD || q.Tier > pb.Tier_TIER_BRONZE {
		return invalid("tier", "%v", q.Tier)
	}
	if !currencyCode.MatchString(q.Currency) {
		return invalid("currency", "%q", clip(q.Currency))
	}
	if err := l.price("price_micros", q.PriceMicros); err != nil {
		return err
	}
	if q.Gpus == 0 {
		return invalid("gpus", "0; want at least 1")
	}
	if q.DurationSeconds == 0 {
		return invalid("duration_seconds", "0")
	}
	return nil
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ms renders a Unix millisecond time for messages.
type ms int64

func (m ms) String() string { return time.UnixMilli(int64(m)).UTC().Format(time.RFC3339) }
