package api

import "time"

// MarketSummary is GET /v1/market: the book in brief, for the
// dashboard's market page, filtered as GET /v1/offers is. Prices are per
// GPU-hour, in Currency, for the query's tier (the offers' base price
// when none is named).
type MarketSummary struct {
	// Offers counts the offers that pass the filters, in any currency;
	// Priced those in Currency, the book's most common one, which the
	// figures below describe.
	Offers   int    `json:"offers"`
	Priced   int    `json:"priced"`
	Currency string `json:"currency"`
	// Models are the canonical models of the offers' first GPU group,
	// most offers first.
	Models []ModelSummary `json:"models"`
	// Histogram is the distribution of the priced offers' prices.
	Histogram PriceHistogram `json:"histogram"`
	// Cheapest are the first offers by price, at most the query's limit.
	Cheapest []OfferView `json:"cheapest"`
}

// ModelSummary is one model's offers.
type ModelSummary struct {
	Model     string `json:"model"`
	Offers    int    `json:"offers"`
	GPUs      int    `json:"gpus"`
	Providers int    `json:"providers"`
	Min       string `json:"min"`
	Median    string `json:"median"`
	P90       string `json:"p90"`
}

// PriceHistogram counts prices in equal bins: Counts[i] holds the prices
// from From + i×Width up to the next bin's start (the last bin holds the
// highest price too).
type PriceHistogram struct {
	From   float64 `json:"from"`
	Width  float64 `json:"width"`
	Counts []int   `json:"counts"`
}

// GPUsStatus is GET /v1/gpus: a provider's GPUs as its GPU source reads
// them now, and the offer it publishes for them.
type GPUsStatus struct {
	// Source is "nvml", "fake:dgxh100" or "static"; Unavailable says why
	// no GPU could be read.
	Source      string       `json:"source"`
	Driver      string       `json:"driver,omitempty"`
	GPUs        []GPUReading `json:"gpus"`
	Unavailable string       `json:"unavailable,omitempty"`
	// Offer is the offer as published now; nil when none is.
	Offer *OfferView `json:"offer,omitempty"`
	// ReadAt is when the GPUs were read.
	ReadAt time.Time `json:"read_at"`
}

// GPUReading is one GPU now.
type GPUReading struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	Name           string  `json:"name"`
	Model          string  `json:"model"`
	MemoryMiB      uint64  `json:"memory_mib"`
	MemoryUsedMiB  uint64  `json:"memory_used_mib"`
	UtilizationPct int     `json:"utilization_pct"`
	TemperatureC   int     `json:"temperature_c"`
	PowerWatts     float64 `json:"power_draw_watts"`
	PowerLimit     float64 `json:"power_limit_watts"`
	// Lease is the lease the GPU is assigned to now, if any.
	Lease string `json:"lease,omitempty"`
}

// RentalView is a rental the node runs for POST /v1/rentals.
type RentalView struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	// State is "renting" (gathering, attesting, proposing), "running"
	// (the lease is signed; Lease names it), "ended" or "failed".
	State string `json:"state"`
	Lease string `json:"lease,omitempty"`
	// Status is the wait it is in now; Progress its last steps.
	Status   string   `json:"status,omitempty"`
	Progress []string `json:"progress"`
	Error    string   `json:"error,omitempty"`
	// Result is the rental's once it ended.
	Result *RentResult `json:"result,omitempty"`
}

// LeaseLogs are where a renter keeps a lease's job output.
type LeaseLogs struct {
	Stdout, Stderr string
}
