package api

import "time"

// OfferQuery filters GET /v1/offers; zero fields match everything.
type OfferQuery struct {
	GPU        string `json:"gpu,omitempty"`
	MinVRAMGiB int    `json:"min_vram_gib,omitempty"`
	Country    string `json:"country,omitempty"`
	MaxPrice   string `json:"max_price,omitempty"`
	Tier       string `json:"tier,omitempty"`
	Sort       string `json:"sort,omitempty"` // one of OfferSorts; price if empty
	// Where is a query in the language of BidRequest.Where, read of each
	// offer whole: GPU terms on one of its groups that the filters above
	// admit, num_gpus counting those GPUs, host terms the whole host,
	// price the listed one.
	Where string `json:"where,omitempty"`
	// Dataset holds the list to the offers whose providers keep the
	// dataset of this CID.
	Dataset string `json:"dataset,omitempty"`
}

// OfferSorts are the orders GET /v1/offers lists in.
var OfferSorts = []string{"price", "total", "vram", "rtt", "reliability", "expiry"}

// GPUView is one group of GPUs in an offer.
type GPUView struct {
	// Model is the GPU catalog's name for the group, and Declared the
	// offer's own where it differs ("RTX4090" for "RTX 4090").
	Model             string `json:"model"`
	Declared          string `json:"declared,omitempty"`
	Count             uint32 `json:"count"`
	VRAMGiB           uint64 `json:"vram_gib"`
	ComputeCapability string `json:"compute_capability"`
	Interconnect      string `json:"interconnect,omitempty"`
	// What NVML read, where the offer says (empty or 0: unknown).
	CUDAVersion         string `json:"cuda_version,omitempty"` // "12.4"
	DriverVersion       string `json:"driver_version,omitempty"`
	PCIeGeneration      uint32 `json:"pcie_generation,omitempty"`
	PCIeLanes           uint32 `json:"pcie_lanes,omitempty"`
	MemoryBandwidthGBps uint32 `json:"memory_bandwidth_gbps,omitempty"`
	FP32GFLOPS          uint32 `json:"fp32_gflops,omitempty"`
}

// OfferView is an offer in the book as the API shows it; prices are
// decimal strings of the offer's currency per GPU-hour.
type OfferView struct {
	Provider    string            `json:"provider"`
	ID          string            `json:"id"`
	Seq         uint64            `json:"seq"`
	GPUs        []GPUView         `json:"gpus"`
	Country     string            `json:"country"`
	Label       string            `json:"label,omitempty"`
	Currency    string            `json:"currency"`
	Price       string            `json:"price"`
	TierPrices  map[string]string `json:"tier_prices,omitempty"`
	Tiers       []string          `json:"tiers"`
	MinDuration string            `json:"min_duration"`
	MaxDuration string            `json:"max_duration"`
	Weekly      []string          `json:"weekly,omitempty"`
	Created     time.Time         `json:"created"`
	Expires     time.Time         `json:"expires"`
	// Reliability is this node's score of the provider, and Basis what
	// it rests on ("0.93: 41 receipts, 12 via trusted peers, 1 dispute").
	Reliability float64 `json:"reliability"`
	Basis       string  `json:"basis"`
	// RTTMillis is the round-trip time to the provider, and RTTSource
	// where it came from: "measured" (ping), "estimated" (network
	// coordinates) or "unknown" (then RTTMillis is 0).
	RTTMillis float64 `json:"rtt_ms"`
	RTTSource string  `json:"rtt_source"`
	// Datasets are the CIDs of the datasets the provider keeps.
	Datasets []string `json:"datasets,omitempty"`
	// Implausible says why the claimed country cannot be true: the RTT
	// measured from this node is below what light needs over the
	// distance. Empty when the claim is plausible or cannot be checked.
	Implausible string `json:"implausible,omitempty"`
	// RelayOnly: the provider is behind a NAT and reached through relays
	// (and, where the NATs allow, directly after hole punching).
	RelayOnly bool `json:"relay_only,omitempty"`
	// StaticAddress and OpenPorts: the host's address is static; the
	// inbound ports a lease gets.
	StaticAddress bool   `json:"static_address,omitempty"`
	OpenPorts     uint32 `json:"open_ports,omitempty"`
	// Attestable: the offer names a standing attestation of its GPUs
	// (read through NVML). One that does not lists its GPUs by hand, and
	// rent passes it by unless told --no-attest.
	Attestable bool `json:"attestable"`
	// ListedTier and ListedPrice are, in a list ranked by price (the
	// market summary's cheapest), the tier the offer is ranked under and
	// the price that tier sells at: the query's tier, or the offer's
	// cheapest when the query names none. Price is the offer's base.
	ListedTier  string `json:"listed_tier,omitempty"`
	ListedPrice string `json:"listed_price,omitempty"`
}

// ReputationView is GET /v1/reputation/{peer}: this node's view of one
// peer, with its inputs and the path its trust took.
type ReputationView struct {
	Peer        string  `json:"peer"`
	Reliability float64 `json:"reliability"` // as a provider, in [0, 1]
	AsRenter    float64 `json:"as_renter"`   // as a renter, in [0, 1]
	Trust       float64 `json:"trust"`       // personalised trust, relative to this node's own
	Receipts    int     `json:"receipts"`    // good receipts as provider
	Trusted     int     `json:"trusted"`     // of them co-signed by trusted renters
	Failures    int     `json:"failures"`
	Disputes    int     `json:"disputes"`
	Good        float64 `json:"good"` // the weighted votes behind reliability
	Bad         float64 `json:"bad"`
	Basis       string  `json:"basis"`
	// Path is how trust reached the peer: from this node (or a seed) over
	// the counterparties that carried the most of it; empty when none did.
	Path []string `json:"path"`
	// Seeds are the peers whose view this node adopts, trust flowing from
	// them as from itself, and where each came from.
	Seeds []SeedView `json:"seeds"`
}

// SeedView is one of a node's trust seeds.
type SeedView struct {
	Peer string `json:"peer"`
	// From is where the node got it: reputation.seeds, a bootstrap peer,
	// the swarm's allow-list, or a bootstrap peer's operator's choice.
	From string `json:"from"`
}

// BidRequest is a renter's job needs, for POST /v1/match and /v1/bids.
type BidRequest struct {
	// Datasets are the CIDs of datasets this node keeps that the job
	// reads: providers that keep them rank ahead of those that would
	// stage them (rent names them with its mounts instead).
	Datasets []string `json:"datasets,omitempty"`
	// GPUs are models or families in any common spelling ("4090",
	// "H100 SXM", "h100" for any H100); the catalog reads them.
	GPUs []string `json:"gpus,omitempty"`
	// FormFactor is "SXM", "PCIe", "NVL" or "Superchip"; any if empty.
	FormFactor string `json:"form_factor,omitempty"`
	NVLink     bool   `json:"nvlink,omitempty"`
	MinVRAMGiB int    `json:"min_vram_gib,omitempty"`
	MinCompute string `json:"min_compute_capability,omitempty"`
	// Host minimums, held to the share of the host the lease's GPUs
	// get (all of it where the provider sells the host whole).
	MinCPUCores    int      `json:"min_cpu_cores,omitempty"`
	MinRAMGiB      int      `json:"min_ram_gib,omitempty"`
	MinDiskGiB     int      `json:"min_disk_gib,omitempty"`
	MinDownMbps    int      `json:"min_down_mbps,omitempty"`
	MinUpMbps      int      `json:"min_up_mbps,omitempty"`
	Count          int      `json:"count"`
	MinPerProvider int      `json:"min_per_provider,omitempty"`
	Hours          float64  `json:"hours"`
	Tier           string   `json:"tier"`
	MaxPrice       string   `json:"max_price"`
	Currency       string   `json:"currency,omitempty"`
	Regions        []string `json:"regions,omitempty"`
	DenyRegions    []string `json:"deny_regions,omitempty"`
	MaxRTTMillis   int      `json:"max_rtt_ms,omitempty"`
	// LatencyWeight is how much RTT raises a provider's effective price in
	// the ranking: at w, an RTT of 100 ms costs w×100% more (0 to 10;
	// absent: 0.5).
	LatencyWeight *float64 `json:"latency_weight,omitempty"`
	// Explain asks a match to count, per check, the whole book's offers
	// that fail it, even when some fit (it always does when none fits).
	Explain bool `json:"explain,omitempty"`
	// Where is a query on offer fields this node's matcher holds offers
	// to besides the bid's terms (market.ParseQuery: "num_gpus>=2
	// cuda>=12.4 down_mbps>500"); a gossiped bid carries none.
	Where string `json:"where,omitempty"`
	// Sort is a field of the query language, "-" after it for falling:
	// a match then ranks every offer that fits by it, not by effective
	// price, and returns the first limit.
	Sort             string  `json:"sort,omitempty"`
	MinReliability   float64 `json:"min_reliability,omitempty"`
	PreemptionOK     bool    `json:"preemption_ok,omitempty"`
	WorkloadClass    string  `json:"workload_class,omitempty"`
	Image            string  `json:"image,omitempty"`
	StartWithinHours float64 `json:"start_within_hours,omitempty"`
	Limit            int     `json:"limit,omitempty"`
	WaitMillis       int     `json:"wait_ms,omitempty"`
}

// CandidateView is one ranked provider for a bid.
type CandidateView struct {
	// Staging says what the provider keeps of the bid's datasets and how
	// long it would take to stage the rest ("holds 38 GB of 40 GB; stages
	// 2 GB in ~16s"); empty for a bid with none. Its time at the price is
	// in the effective price.
	Staging        string             `json:"staging,omitempty"`
	Rank           int                `json:"rank"`
	Offer          OfferView          `json:"offer"`
	GPUs           uint32             `json:"gpus"`
	Price          string             `json:"price"`
	EffectivePrice string             `json:"effective_price"`
	Total          string             `json:"total"`
	Start          time.Time          `json:"start"`
	Scores         map[string]float64 `json:"scores"`
}

// MatchResult answers POST /v1/match. Where Explained (nothing fits,
// or the request asked), Considered and Feasible count the whole book's
// offers and Reasons say, per check, how many offers failed it first
// (most first); else they count the offers the ranking's walk held to
// the checks: it stops once no cheaper offer can enter the list, and
// past the list's last it checks only an offer whose price, RTT and
// reliability would rank it higher. Explanation
// reads them when nothing fits, leading with Blocker.
type MatchResult struct {
	Explained  bool            `json:"explained"`
	Considered int             `json:"considered"`
	Feasible   int             `json:"feasible"`
	Candidates []CandidateView `json:"candidates"`
	Reasons    []ReasonView    `json:"reasons,omitempty"`
	// Blocker is, when nothing fits, the one constraint whose moving
	// alone lets the most offers fit.
	Blocker *BlockerView `json:"blocker,omitempty"`
	// Nearest are, where offers lack the model asked, the models they
	// have instead, nearest by chip, memory and family, at most three.
	Nearest     []NearView `json:"nearest,omitempty"`
	Explanation string     `json:"explanation,omitempty"`
}

// BlockerView is the constraint that keeps a request from every offer.
type BlockerView struct {
	Check  string `json:"check"`  // "price"
	Kind   string `json:"kind"`   // "silver price above 0.12"
	Fit    int    `json:"fit"`    // offers that fit with it moved
	Figure string `json:"figure"` // "the cheapest asks 0.1333/GPU-h"
	// Cheapest are the cheapest of those offers, at most three.
	Cheapest []NearOfferView `json:"cheapest,omitempty"`
}

// NearOfferView is an offer that fits but for one constraint.
type NearOfferView struct {
	Provider string `json:"provider"`
	OfferID  string `json:"offer_id"`
	GPUs     uint32 `json:"gpus"`
	Price    string `json:"price"`
}

// NearView is a model the book has where the bid wants another.
type NearView struct {
	Model string `json:"model"`
	// Offers of it: when nothing fits, those that fit but for the model.
	Offers int `json:"offers"`
	// From is the least price per GPU-hour of a lease of GPUs of it for
	// the bid's count, host needs and tier; empty where none fits.
	From string `json:"from,omitempty"`
	GPUs uint32 `json:"gpus,omitempty"`
}

// ReasonView is one check that offers failed for a bid: how many failed
// it first, and one such offer's figures.
type ReasonView struct {
	Check   string `json:"check"`   // such as "vram"
	Kind    string `json:"kind"`    // "vram below 40 GB"
	Offers  int    `json:"offers"`  // how many failed it first
	Example string `json:"example"` // "vram 24 GB < 40 GB required"
}

// QuoteView is a provider's signed answer to a bid.
type QuoteView struct {
	Provider string    `json:"provider"`
	OfferID  string    `json:"offer_id"`
	Tier     string    `json:"tier"`
	GPUs     uint32    `json:"gpus"`
	Price    string    `json:"price"`
	Currency string    `json:"currency"`
	Total    string    `json:"total"`
	Start    time.Time `json:"start"`
	Expires  time.Time `json:"expires"`
}

// BidResult answers POST /v1/bids: the bid published and the quotes that
// came back while the daemon waited.
type BidResult struct {
	BidID  string      `json:"bid_id"`
	Quotes []QuoteView `json:"quotes"`
}

// AttestRequest asks POST /v1/attest to challenge a peer.
type AttestRequest struct {
	Peer string `json:"peer"`
}

// AttestedGPU is one GPU of a verified attestation.
type AttestedGPU struct {
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	MemoryGiB         uint64 `json:"memory_gib"`
	ComputeCapability string `json:"compute_capability"`
	// CC is this GPU's confidential-computing verdict: "absent",
	// "present, not verified", "verified" or "invalid: …".
	CC string `json:"confidential_computing"`
}

// AttestResult is the verdict on a peer's attestation.
type AttestResult struct {
	Peer      string        `json:"peer"`
	Verified  bool          `json:"verified"`
	Reason    string        `json:"reason,omitempty"`
	RTTMillis float64       `json:"rtt_ms"`
	Driver    string        `json:"driver_version,omitempty"`
	CUDA      string        `json:"cuda_version,omitempty"`
	GPUs      []AttestedGPU `json:"gpus"`
	// Offer says whether the peer's offer in this node's book claims only
	// attested GPUs and names a standing attestation of the same hardware:
	// "covered; …", "not covered: …" or "no offer in the book".
	Offer string `json:"offer"`
	// Changes since the last document this node saw from the peer.
	Changes []string `json:"changes"`
	// Confidential computing over all GPUs: "absent", "present, not
	// verified" (no attest.cc_root_cert), "verified", "invalid: …" or
	// "mixed: …".
	CC string `json:"confidential_computing"`
}

// MaxLatencyWeight bounds a BidRequest's LatencyWeight.
const MaxLatencyWeight = 10
