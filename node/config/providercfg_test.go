package config

import (
	"errors"
	"testing"
	"time"
)

func TestParseWeekly(t *testing.T) {
	for in, want := range map[string]WeeklySpan{
		"Mon 18:00-Tue 08:00":          {Start: 18 * 60, End: 1440 + 8*60},
		"Sat 00:00-Sun 24:00":          {Start: 5 * 1440, End: 7 * 1440},
		"Wed 09:00-17:30 floor 1.50":   {Start: 2*1440 + 9*60, End: 2*1440 + 17*60 + 30, FloorMicros: 1_500_000},
		"Mon 09:00-18:00 peak":         {Start: 9 * 60, End: 18 * 60, Peak: true},
		"Fri 09:00-18:00 floor 2 peak": {Start: 4*1440 + 9*60, End: 4*1440 + 18*60, FloorMicros: 2_000_000, Peak: true},
	} {
		if got, err := ParseWeekly(in); err != nil || got != want {
			t.Errorf("ParseWeekly(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Mon 18:00", "Sun 22:00-Mon 06:00", "Mon 25:00-26:00", "Mon 10:00-09:00", "mon 10:00-11:00", "Mon 10:00-11:00 floor x", "Mon 10:00-11:00 peak floor 2", "Mon 10:00-11:00 peaky"} {
		if _, err := ParseWeekly(in); err == nil {
			t.Errorf("ParseWeekly(%q) accepted", in)
		}
	}
}

func TestProviderConfigValidation(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*ProviderConfig)
	}{
		{"provider.currency", func(p *ProviderConfig) { p.Currency = "dollars" }},
		{"provider.price", func(p *ProviderConfig) { p.Price = "free" }},
		{"provider.price", func(p *ProviderConfig) { p.Price = "0" }},
		{"provider.bronze_price", func(p *ProviderConfig) { p.BronzePrice = "x" }},
		{"provider.tiers", func(p *ProviderConfig) { p.Tiers = nil }},
		{"provider.tiers[1]", func(p *ProviderConfig) { p.Tiers = []string{"gold", "platinum"} }},
		{"provider.bronze_notice", func(p *ProviderConfig) { p.BronzeNotice = Dur(0) }},
		{"provider.max_duration", func(p *ProviderConfig) { p.MaxDuration = Dur(time.Minute) }},
		{"provider.max_start_ahead", func(p *ProviderConfig) { p.MaxStartAhead = Dur(400 * 24 * time.Hour) }},
		{"provider.max_leases_per_renter", func(p *ProviderConfig) { p.RenterLeases = 0 }},
		{"provider.min_renter_score", func(p *ProviderConfig) { p.MinRenterScore = 1.5 }},
		{"provider.new_renter_share", func(p *ProviderConfig) { p.NewRenterShare = -0.1 }},
		{"provider.new_renter_share", func(p *ProviderConfig) { p.NewRenterShare = 2 }},
		{"provider.weekly[0]", func(p *ProviderConfig) { p.Weekly = []string{"weekends"} }},
		{"provider.weekly[1]", func(p *ProviderConfig) { p.Weekly = []string{"Tue 00:00-Wed 00:00", "Mon 00:00-Mon 10:00"} }},
		{"provider.country", func(p *ProviderConfig) { p.Country = "Germany" }},
		{"provider.offer_ttl", func(p *ProviderConfig) { p.OfferTTL = Dur(48 * time.Hour) }},
		{"provider.host.cpu_cores", func(p *ProviderConfig) { p.Host.CPUCores = 0 }},
		{"provider.host.share", func(p *ProviderConfig) { p.Host.Share = "half" }},
		{"provider.gpu_step", func(p *ProviderConfig) { p.GPUStep = 65 }},
		{"provider.gpus", func(p *ProviderConfig) { p.Enabled = true }},
		{"provider.pricing.policy", func(p *ProviderConfig) { p.Pricing.Policy = "auction" }},
		{"provider.pricing.peak_factor", func(p *ProviderConfig) { p.Pricing.PeakFactor = 0.5 }},
		{"provider.pricing.floor", func(p *ProviderConfig) { p.Pricing.Policy = PolicyMarket }},
		{"provider.pricing.percentile", func(p *ProviderConfig) {
			p.Pricing = PricingConfig{Policy: PolicyMarket, Percentile: 150, Floor: "1", Ceiling: "2", PeakFactor: 1}
		}},
		{"provider.pricing.ceiling", func(p *ProviderConfig) {
			p.Pricing = PricingConfig{Policy: PolicyMarket, Percentile: 50, Floor: "2", Ceiling: "1.50", PeakFactor: 1}
		}},
		{"provider.pricing.ceiling", func(p *ProviderConfig) { p.Pricing.Floor, p.Pricing.Ceiling = "2", "1.50" }}, // fixed prices too
		{"provider.pricing.floor", func(p *ProviderConfig) { p.Pricing.Floor = "-1" }},
		{"provider.gpus[0].count", func(p *ProviderConfig) {
			p.GPUs = []GPUConfig{{Model: "A100", Count: 0, VRAMGiB: 80, ComputeCapability: "8.0"}}
		}},
		{"provider.gpus[0].compute_capability", func(p *ProviderConfig) {
			p.GPUs = []GPUConfig{{Model: "A100", Count: 1, VRAMGiB: 80, ComputeCapability: "eight"}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			c := DefaultConfig(ProfileProvider).Clone()
			tc.edit(&c.Provider)
			var fe *FieldError
			if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a FieldError for %s", err, tc.field)
			}
		})
	}
}
