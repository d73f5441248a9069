package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
)

// ProviderConfig is the [provider] section: what this node sells and on
// what terms. With enabled = false the node sells nothing.
type ProviderConfig struct {
	Enabled         bool          `toml:"enabled" comment:"sell GPU time: publish offers built from the settings below"`
	Currency        string        `toml:"currency" comment:"currency of every price, such as USD"`
	Price           string        `toml:"price" comment:"base price per GPU-hour, a decimal such as \"2.10\" (silver, and gold unless gold_price is set)"`
	GoldPrice       string        `toml:"gold_price" comment:"price per GPU-hour for reserved (gold) leases; empty: price"`
	BronzePrice     string        `toml:"bronze_price" comment:"price per GPU-hour for preemptible (bronze) leases; empty: price"`
	Tiers           []string      `toml:"tiers" comment:"tiers sold: gold (reserved), silver (on demand), bronze (preemptible)"`
	BronzeNotice    Duration      `toml:"bronze_notice" comment:"notice a bronze lease gets before it is preempted"`
	MinDuration     Duration      `toml:"min_duration" comment:"shortest lease sold"`
	MaxDuration     Duration      `toml:"max_duration" comment:"longest lease sold"`
	MaxStartAhead   Duration      `toml:"max_start_ahead" comment:"how far ahead of now a lease may start; published in the offer"`
	RenterLeases    int           `toml:"max_leases_per_renter" comment:"open leases one renter may hold here; a receipt it left unsigned counts as one for a day"`
	NewRenterShare  float64       `toml:"new_renter_share" comment:"share (0 to 1) of the GPUs at any instant, and of a day's GPU-hours, that renters with no history here (no receipt or trust path) may hold together, booked more than 2 hours ahead (a lease that starts now is use, not a hold); 1: as much as a day of every GPU"`
	MinRenterScore  float64       `toml:"min_renter_score" comment:"least score as a renter (0 to 1; one with no history has 0.6) asked for a gold lease or one that starts more than a day ahead; 0: none"`
	Weekly          []string      `toml:"weekly" comment:"weekly availability in UTC, each \"Mon 18:00-Tue 08:00\" with an optional \" floor 1.50\"; empty: always"`
	Country         string        `toml:"country" comment:"ISO 3166 country code of the hardware, such as DE"`
	RegionLabel     string        `toml:"region_label" comment:"free region label, such as eu-central or a data centre's name"`
	WorkloadClasses []string      `toml:"workload_classes" comment:"workload classes accepted, such as training or inference; empty: any"`
	ImageAllow      []string      `toml:"image_allow" comment:"images allowed: repositories (and what is under them), namespaces or registries ending in /, tagged references or image IDs, matched after Docker's normalisation; empty: any"`
	ImageDeny       []string      `toml:"image_deny" comment:"images refused, written as for image_allow; an image is judged by its ID and all its names"`
	PowerCapWatts   int           `toml:"power_cap_watts" comment:"power cap per GPU in watts; 0: none"`
	ThermalCapC     int           `toml:"thermal_cap_celsius" comment:"thermal cap in degrees Celsius; 0: none"`
	OfferTTL        Duration      `toml:"offer_ttl" comment:"how long a published offer is valid; it is re-published after three quarters of this"`
	GPUSource       string        `toml:"gpu_source" comment:"where the GPUs for sale come from: static (provider.gpus), nvml (this machine's GPUs), or fake:dgxa100|dgxh100|dgxh200|dgxb200"`
	Share           []string      `toml:"share" comment:"with nvml or fake: the GPUs to sell, by index or UUID; empty sells all"`
	BusyUtilization int           `toml:"busy_utilization" comment:"with nvml or fake: a GPU above this utilisation (percent), or running a process, is withdrawn until it is idle"`
	WatchInterval   Duration      `toml:"watch_interval" comment:"with nvml or fake: how often the GPUs are read; a change republishes or withdraws the offer"`
	GPUStep         int           `toml:"gpu_step" comment:"a lease takes a multiple of this many GPUs: 1 any count, 2 pairs, …"`
	SellWhole       bool          `toml:"sell_whole" comment:"a lease takes every GPU offered (the machine sold whole)"`
	Host            HostConfig    `toml:"host" comment:"the machine around the GPUs"`
	Pricing         PricingConfig `toml:"pricing" comment:"how the prices are set: as above, or following the market"`
	GPUs            []GPUConfig   `toml:"gpus" comment:"with gpu_source = static: the GPUs for sale, one [[provider.gpus]] table per group"`
}

// PricingConfig is [provider.pricing]: a fixed price (price, gold_price,
// bronze_price), or one that follows the comparable offers in the book,
// re-evaluated at each re-publish; peak weekly windows priced up either
// way. An agreed lease keeps its price.
type PricingConfig struct {
	Policy     string  `toml:"policy" comment:"fixed: the prices above; market: a percentile of the comparable offers in the book (same model, tier and currency), within floor and ceiling, moving half way to it at each re-publish; the prices above stand where the book has none"`
	Percentile float64 `toml:"percentile" comment:"with market: the percentile of comparable prices to follow, 0 to 100 (50: the median, 25: cheaper than three in four)"`
	Floor      string  `toml:"floor" comment:"with market: the least price per GPU-hour, such as \"1.20\""`
	Ceiling    string  `toml:"ceiling" comment:"with market: the most price per GPU-hour, such as \"4.00\""`
	PeakFactor float64 `toml:"peak_factor" comment:"weekly windows marked \" peak\" ask at least the price times this (1: no peak pricing)"`
	MaxStep    float64 `toml:"max_step" comment:"with market: the largest share of the price one re-publish moves it by, 0.01 to 0.5 (0: the default, 0.10)"`
}

// HostConfig describes the provider's machine.
type HostConfig struct {
	// Share is how a lease shares the host: "per-gpu" (in proportion to
	// its GPUs: a lease of 2 of 8 GPUs gets a quarter, and its container
	// is held to a quarter of the cores and RAM; the default, also when
	// empty) or "whole" (every lease gets all of it).
	Share    string `toml:"share" comment:"how a lease shares the host: per-gpu (in proportion to its GPUs, and its container held to that share of the cores and RAM) or whole"`
	CPUCores int    `toml:"cpu_cores" comment:"CPU cores available to leases"`
	RAMGiB   int    `toml:"ram_gib" comment:"memory available to leases, GiB"`
	DiskGiB  int    `toml:"disk_gib" comment:"disk available to leases, GiB"`
	UpMbps   int    `toml:"up_mbps" comment:"upload bandwidth, Mbit/s"`
	DownMbps int    `toml:"down_mbps" comment:"download bandwidth, Mbit/s"`
	// StaticAddress and OpenPorts are what the offer says of reaching a
	// lease: the host's address is static; how many inbound ports a
	// lease gets.
	StaticAddress bool `toml:"static_address" comment:"the host's public address is static"`
	OpenPorts     int  `toml:"open_ports" comment:"inbound ports open to a lease; 0: none"`
}

// GPUConfig is one group of identical GPUs.
type GPUConfig struct {
	Model             string `toml:"model" comment:"model name, such as H100"`
	Count             int    `toml:"count" comment:"how many"`
	VRAMGiB           int    `toml:"vram_gib" comment:"memory per GPU, GiB"`
	ComputeCapability string `toml:"compute_capability" comment:"CUDA compute capability, such as 9.0"`
	Interconnect      string `toml:"interconnect" comment:"nvlink, sxm or pcie"`
	// What NVML reads (gpu_source nvml or fake), or what a hand-listed
	// group says of itself; 0 or empty: unknown. Offers carry them, and
	// renters query them (quote --where 'cuda>=12.4 pcie_gen>=4').
	CUDAVersion         string `toml:"cuda_version,omitempty" comment:"CUDA version the driver supports, such as 12.4"`
	DriverVersion       string `toml:"driver_version,omitempty" comment:"driver version, such as 550.54.15"`
	PCIeGeneration      int    `toml:"pcie_generation,omitempty" comment:"PCIe link generation"`
	PCIeLanes           int    `toml:"pcie_lanes,omitempty" comment:"PCIe link width, lanes"`
	MemoryBandwidthGBps int    `toml:"memory_bandwidth_gbps,omitempty" comment:"GPU memory bandwidth, GB/s"`
	FP32GFLOPS          int    `toml:"fp32_gflops,omitempty" comment:"peak FP32 throughput, GFLOPS"`
}

// DefaultProviderConfig sells nothing until enabled, with sane terms.
func DefaultProviderConfig() ProviderConfig {
	return ProviderConfig{
		Currency:        "USD",
		Price:           "2.00",
		Tiers:           []string{"silver", "bronze"},
		BronzeNotice:    Dur(2 * time.Minute),
		MinDuration:     Dur(10 * time.Minute),
		MaxDuration:     Dur(24 * time.Hour),
		MaxStartAhead:   Dur(market.DefaultStartAhead),
		RenterLeases:    4,
		NewRenterShare:  0.5,
		Weekly:          []string{},
		Country:         "US",
		WorkloadClasses: []string{},
		ImageAllow:      []string{},
		ImageDeny:       []string{},
		OfferTTL:        Dur(time.Hour),
		GPUSource:       "static",
		Share:           []string{},
		BusyUtilization: 10,
		GPUStep:         1,
		WatchInterval:   Dur(10 * time.Second),
		Host:            HostConfig{Share: "per-gpu", CPUCores: 16, RAMGiB: 64, DiskGiB: 500, UpMbps: 1000, DownMbps: 1000},
		Pricing:         PricingConfig{Policy: "fixed", Percentile: 50, PeakFactor: 1},
		GPUs:            []GPUConfig{},
	}
}

var (
	countryCodeRE  = regexp.MustCompile(`^[A-Z]{2}$`)
	currencyCodeRE = regexp.MustCompile(`^[A-Z]{3,5}$`)
	ccRE           = regexp.MustCompile(`^([0-9]{1,2})\.([0-9])$`)
	weeklyRE       = regexp.MustCompile(`^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([0-2][0-9]):([0-5][0-9])-(?:(Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?([0-2][0-9]):([0-5][0-9])(?: floor ([0-9.]+))?( peak)?$`)
	gpuSourceRE    = regexp.MustCompile(`^(static|nvml|fake:dgx(a100|h100|h200|b200))$`)
	Weekdays       = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	tierNames      = []string{"gold", "silver", "bronze"}
)

// WeeklySpan is a parsed weekly window: minutes since Monday 00:00 UTC.
// A peak window asks at least the price times provider.pricing.peak_factor.
type WeeklySpan struct {
	Start, End  uint32
	FloorMicros uint64
	Peak        bool
}

// ParseWeekly reads "Mon 18:00-Tue 08:00 floor 1.50 peak" (the second
// day, the floor and peak are optional; 24:00 ends a day).
func ParseWeekly(s string) (WeeklySpan, error) {
	m := weeklyRE.FindStringSubmatch(s)
	if m == nil {
		return WeeklySpan{}, fmt.Errorf("%q: want \"Mon 18:00-Tue 08:00\", optionally followed by \" floor 1.50\" and \" peak\"", s)
	}
	minute := func(day, hh, mm string) (uint32, bool) {
		h, _ := strconv.Atoi(hh)
		mi, _ := strconv.Atoi(mm)
		if h > 24 || (h == 24 && mi != 0) {
			return 0, false
		}
		return uint32(slices.Index(Weekdays, day)*1440 + h*60 + mi), true
	}
	endDay := m[4]
	if endDay == "" {
		endDay = m[1]
	}
	start, ok1 := minute(m[1], m[2], m[3])
	end, ok2 := minute(endDay, m[5], m[6])
	if !ok1 || !ok2 || end <= start {
		return WeeklySpan{}, fmt.Errorf("%q: the window must end after it starts within one week (Mon 00:00 to Sun 24:00); split one that wraps", s)
	}
	w := WeeklySpan{Start: start, End: end, Peak: m[8] != ""}
	if m[7] != "" {
		f, err := market.ParsePrice(m[7])
		if err != nil {
			return WeeklySpan{}, fmt.Errorf("%q: floor %w", s, err)
		}
		w.FloorMicros = f
	}
	return w, nil
}

// ParseComputeCapability reads "9.0" as 90.
func ParseComputeCapability(s string) (uint32, error) {
	m := ccRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q: want major.minor such as 8.6", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return uint32(major*10 + minor), nil
}

func (p *ProviderConfig) validate() error {
	for _, check := range []func() error{p.validateTerms, p.validateWindows, p.validateMachine, p.validateGPUs} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateTerms checks what a lease is sold on: currency, prices, tiers,
// durations and the limits per renter.
func (p *ProviderConfig) validateTerms() error {
	if !currencyCodeRE.MatchString(p.Currency) {
		return FieldErr("provider.currency", p.Currency, "a currency code such as USD")
	}
	for _, f := range []struct{ name, v string }{{"provider.price", p.Price}, {"provider.gold_price", p.GoldPrice}, {"provider.bronze_price", p.BronzePrice}} {
		if f.v == "" && f.name != "provider.price" {
			continue
		}
		if v, err := market.ParsePrice(f.v); err != nil || v < 1_000 || v > 10_000_000_000 {
			return FieldErr(f.name, f.v, "a decimal price per GPU-hour from 0.001 to 10000, such as \"2.10\"")
		}
	}
	if len(p.Tiers) == 0 {
		return FieldErr("provider.tiers", p.Tiers, "one or more of gold, silver, bronze")
	}
	for i, t := range p.Tiers {
		if !slices.Contains(tierNames, t) {
			return FieldErr(fmt.Sprintf("provider.tiers[%d]", i), t, "gold, silver or bronze")
		}
	}
	if err := durRange("provider.bronze_notice", p.BronzeNotice, time.Second, time.Hour); err != nil {
		return err
	}
	if err := durRange("provider.min_duration", p.MinDuration, time.Minute, 366*24*time.Hour); err != nil {
		return err
	}
	if err := durRange("provider.max_duration", p.MaxDuration, p.MinDuration.Std(), 366*24*time.Hour); err != nil {
		return err
	}
	if err := durRange("provider.max_start_ahead", p.MaxStartAhead, time.Minute, market.MaxStartAhead); err != nil {
		return err
	}
	if err := intRange("provider.max_leases_per_renter", p.RenterLeases, 1, 1024); err != nil {
		return err
	}
	if p.NewRenterShare < 0 || p.NewRenterShare > 1 || math.IsNaN(p.NewRenterShare) {
		return FieldErr("provider.new_renter_share", p.NewRenterShare, "0 to 1")
	}
	if p.MinRenterScore < 0 || p.MinRenterScore > 1 {
		return FieldErr("provider.min_renter_score", p.MinRenterScore, "0 to 1")
	}
	return nil
}

// validateWindows checks the weekly calendar and the pricing policy.
func (p *ProviderConfig) validateWindows() error {
	var prevEnd uint32
	for i, w := range p.Weekly {
		span, err := ParseWeekly(w)
		if err != nil {
			return FieldErr(fmt.Sprintf("provider.weekly[%d]", i), w, "\"Mon 18:00-Tue 08:00\" with an optional \" floor 1.50\" and \" peak\", in UTC")
		}
		if i > 0 && span.Start < prevEnd {
			return FieldErr(fmt.Sprintf("provider.weekly[%d]", i), w, "windows in week order that do not overlap")
		}
		prevEnd = span.End
	}
	if _, _, err := p.Pricing.MarketPolicy(); err != nil {
		return err
	}
	return nil
}

// validateMachine checks where the provider is and what its host is:
// country, the offer's lifetime, power and thermal caps, the host's
// resources and their sharing, and how its GPUs are read and watched.
func (p *ProviderConfig) validateMachine() error {
	if !countryCodeRE.MatchString(p.Country) {
		return FieldErr("provider.country", p.Country, "an ISO 3166 country code such as DE")
	}
	if err := durRange("provider.offer_ttl", p.OfferTTL, time.Minute, 24*time.Hour); err != nil {
		return err
	}
	if err := intRange("provider.power_cap_watts", p.PowerCapWatts, 0, 5000); err != nil {
		return err
	}
	if err := intRange("provider.thermal_cap_celsius", p.ThermalCapC, 0, 150); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		v, lo int
	}{{"provider.host.cpu_cores", p.Host.CPUCores, 1}, {"provider.host.ram_gib", p.Host.RAMGiB, 1}, {"provider.host.disk_gib", p.Host.DiskGiB, 0}, {"provider.host.up_mbps", p.Host.UpMbps, 0}, {"provider.host.down_mbps", p.Host.DownMbps, 0}} {
		if err := intRange(f.name, f.v, f.lo, 1<<24); err != nil {
			return err
		}
	}
	if err := intRange("provider.host.open_ports", p.Host.OpenPorts, 0, 65535); err != nil {
		return err
	}
	if p.Host.Share != "" && p.Host.Share != "per-gpu" && p.Host.Share != "whole" {
		return FieldErr("provider.host.share", p.Host.Share, "per-gpu or whole")
	}
	if !gpuSourceRE.MatchString(p.GPUSource) {
		return FieldErr("provider.gpu_source", p.GPUSource, "static, nvml, or fake:dgxa100, fake:dgxh100, fake:dgxh200 or fake:dgxb200")
	}
	if err := intRange("provider.gpu_step", p.GPUStep, 0, 64); err != nil {
		return err
	}
	if err := intRange("provider.busy_utilization", p.BusyUtilization, 0, 100); err != nil {
		return err
	}
	if err := durRange("provider.watch_interval", p.WatchInterval, time.Second, 10*time.Minute); err != nil {
		return err
	}
	return nil
}

// validateGPUs checks the GPUs listed by hand.
func (p *ProviderConfig) validateGPUs() error {
	if p.Enabled && p.GPUSource == "static" && len(p.GPUs) == 0 {
		return FieldErr("provider.gpus", "[]", "at least one [[provider.gpus]] group when provider.enabled is true and gpu_source is static")
	}
	for i, g := range p.GPUs {
		f := fmt.Sprintf("provider.gpus[%d]", i)
		if g.Model == "" || len(g.Model) > 64 {
			return FieldErr(f+".model", g.Model, "a model name such as H100")
		}
		if err := intRange(f+".count", g.Count, 1, 64); err != nil {
			return err
		}
		if err := intRange(f+".vram_gib", g.VRAMGiB, 1, 4096); err != nil {
			return err
		}
		if _, err := ParseComputeCapability(g.ComputeCapability); err != nil {
			return FieldErr(f+".compute_capability", g.ComputeCapability, "major.minor such as 9.0")
		}
		if _, err := ParseCUDAVersion(g.CUDAVersion); err != nil {
			return FieldErr(f+".cuda_version", g.CUDAVersion, "major.minor such as 12.4, or empty")
		}
		if len(g.DriverVersion) > 32 || strings.Trim(g.DriverVersion, "0123456789.") != "" {
			return FieldErr(f+".driver_version", g.DriverVersion, "digits and dots, at most 32, such as 550.54.15")
		}
		for _, r := range []struct {
			name      string
			v, lo, hi int
		}{{".pcie_generation", g.PCIeGeneration, 0, 16}, {".pcie_lanes", g.PCIeLanes, 0, 64}, {".memory_bandwidth_gbps", g.MemoryBandwidthGBps, 0, 1_000_000}, {".fp32_gflops", g.FP32GFLOPS, 0, 100_000_000}} {
			if err := intRange(f+r.name, r.v, r.lo, r.hi); err != nil {
				return err
			}
		}
	}
	return nil
}

// ParseCUDAVersion reads a CUDA version such as "12.4" as 1204 (major
// times 100 plus the minor); empty is 0, unknown.
func ParseCUDAVersion(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	major, minor, ok := strings.Cut(s, ".")
	ma, err1 := strconv.ParseUint(major, 10, 8)
	mi, err2 := strconv.ParseUint(minor, 10, 8)
	if !ok || err1 != nil || err2 != nil || ma > 99 || mi > 99 {
		return 0, fmt.Errorf("%q: want major.minor such as 12.4", s)
	}
	return uint32(ma*100 + mi), nil
}

// Pricing policies.
const (
	PolicyFixed  = "fixed"
	PolicyMarket = "market"
)

// MarketPolicy reads [provider.pricing]: the market policy it sets, and
// whether prices follow the market (policy = "market"); with fixed
// prices the policy only prices peak windows up.
func (c PricingConfig) MarketPolicy() (market.PricingPolicy, bool, error) {
	pol := market.PricingPolicy{Percentile: c.Percentile, Floor: 1, Ceiling: math.MaxUint64 / 2, PeakFactor: c.PeakFactor, MaxStep: c.MaxStep}
	if math.IsNaN(c.PeakFactor) || c.PeakFactor < 1 || c.PeakFactor > 10 {
		return pol, false, FieldErr("provider.pricing.peak_factor", c.PeakFactor, "1 (no peak pricing) to 10")
	}
	if pol.MaxStep == 0 {
		pol.MaxStep = DefaultMaxStep
	}
	if math.IsNaN(c.MaxStep) || c.MaxStep != 0 && (c.MaxStep < 0.01 || c.MaxStep > 0.5) {
		return pol, false, FieldErr("provider.pricing.max_step", c.MaxStep, "0.01 to 0.5 (0.10: a tenth of the price per re-publish), or 0 for the default")
	}
	follows := c.Policy == PolicyMarket
	if !follows && c.Policy != PolicyFixed {
		return pol, false, FieldErr("provider.pricing.policy", c.Policy, "fixed or market")
	}
	if follows && (math.IsNaN(c.Percentile) || c.Percentile < 0 || c.Percentile > 100) {
		return pol, false, FieldErr("provider.pricing.percentile", c.Percentile, "0 to 100 (50: the median)")
	}
	// The floor and the ceiling are checked whatever the policy, so that
	// a switch to market finds them sound; fixed prices ignore them.
	floor, ceiling := pol.Floor, pol.Ceiling
	for _, f := range []struct {
		name, v string
		to      *uint64
	}{{"provider.pricing.floor", c.Floor, &floor}, {"provider.pricing.ceiling", c.Ceiling, &ceiling}} {
		if f.v == "" && !follows {
			continue
		}
		var err error
		if *f.to, err = market.ParsePrice(f.v); err != nil || *f.to < 1_000 || *f.to > 10_000_000_000 {
			return pol, false, FieldErr(f.name, f.v, "a decimal price per GPU-hour from 0.001 to 10000, such as \"1.20\" (with policy = \"market\", one is needed)")
		}
	}
	if ceiling < floor {
		return pol, false, FieldErr("provider.pricing.ceiling", c.Ceiling, fmt.Sprintf("at least provider.pricing.floor = %q", c.Floor))
	}
	if !follows {
		return pol, false, nil
	}
	pol.Floor, pol.Ceiling = floor, ceiling
	return pol, true, pol.Validate()
}

// DefaultMaxStep is the most a market price moves per re-publish, as a
// share of where it stands (provider.pricing.max_step).
const DefaultMaxStep = 0.10
