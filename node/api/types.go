package api

import "time"

// Status is the body of GET /v1/status.
type Status struct {
	PeerID    string    `json:"peer_id"`
	Listen    []string  `json:"listen"`
	Announced []string  `json:"announced"`
	Observed  []string  `json:"observed"`
	Swarm     string    `json:"swarm"`
	SwarmID   string    `json:"swarm_id"`
	Private   bool      `json:"private"`
	Profile   string    `json:"profile"`
	Mode      string    `json:"mode"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	UptimeSec float64   `json:"uptime_seconds"`
	Peers     int       `json:"peers"`
	// RoutingTable is the number of peers in the DHT routing table.
	RoutingTable int `json:"routing_table"`
	// Offers and Bids count what the node's book holds.
	Offers int `json:"offers"`
	Bids   int `json:"bids"`
	// Provider says whether this node sells GPU time.
	Provider bool `json:"provider"`
	// Topics maps each gossip topic to its subscribed and mesh peers.
	Topics map[string]TopicStatus `json:"topics"`
	// Leases sums up this node's leases, either side.
	Leases LeaseSummary `json:"leases"`
	// Location is where this node is (network.location, or a provider's
	// country); empty: unknown, and no claimed region is checked.
	Location string `json:"location"`
	// Coordinate is this node's network coordinate, from which it
	// estimates RTTs to peers it has not measured.
	Coordinate CoordinateStatus `json:"coordinate"`
	// Reachability is how peers reach this node: State public, private
	// or unknown (AutoNAT has not decided yet), How direct, relayed
	// (through relays' circuit addresses) or none.
	Reachability Reachability `json:"reachability"`
	// Pricing is a provider's: its prices, what its policy would set now,
	// its fill rate and earnings; nil on a node that sells nothing.
	Pricing *PricingStatus `json:"pricing,omitempty"`
}

// PricingStatus is how a provider prices and how it sells.
type PricingStatus struct {
	// Policy is "fixed" or "market"; Rule says the market one, such as
	// "p50 of the market within 1.20-4.00, peak ×1.25".
	Policy   string `json:"policy"`
	Rule     string `json:"rule,omitempty"`
	Currency string `json:"currency"`
	// Tiers are the tiers sold: the price the offer asks and what the
	// policy would set now, from the comparable offers in the book.
	Tiers []TierPriceStatus `json:"tiers"`
	// Since is the start of the period the fill rates and earnings
	// cover: the last 7 days, or since the provider began selling.
	Since time.Time `json:"since"`
	// Fill is, per weekly window of the offer (one "always" without
	// windows), GPU-hours leased of GPU-hours offered.
	Fill []WindowFillStatus `json:"fill"`
	// EarnedPerDay is the receipts' amounts per UTC day of the period,
	// in Currency; EarnedDaily their mean per day.
	EarnedPerDay []DayEarnings `json:"earned_per_day"`
	EarnedDaily  string        `json:"earned_daily"`
}

// TierPriceStatus is one tier's price.
type TierPriceStatus struct {
	Tier  string `json:"tier"`
	Price string `json:"price"`
	// WouldSet is what the policy sets now (fixed: the configured price),
	// from Comparable offers in the book.
	WouldSet   string `json:"would_set"`
	Comparable int    `json:"comparable"`
}

// WindowFillStatus is one window's fill rate.
type WindowFillStatus struct {
	Window       string  `json:"window"` // "Mon 18:00-Tue 08:00", or "always"
	Peak         bool    `json:"peak"`
	OfferedHours float64 `json:"offered_gpu_hours"`
	LeasedHours  float64 `json:"leased_gpu_hours"`
	Rate         float64 `json:"fill_rate"`
}

// DayEarnings is what was earned on one UTC day.
type DayEarnings struct {
	Day    string `json:"day"` // 2026-12-04
	Amount string `json:"amount"`
}

// Reachability is how peers reach a node: State is AutoNAT's word
// (public, private, unknown), How one of ReachDirect, ReachRelayed and
// ReachNone.
type Reachability struct {
	State string `json:"state"`
	How   string `json:"how"`
}

// How a node is reached (Reachability.How).
const (
	ReachDirect  = "direct"
	ReachRelayed = "relayed"
	ReachNone    = "none"
)

// CoordinateStatus is the state of this node's network coordinate.
type CoordinateStatus struct {
	// Error is the coordinate's own error estimate: 1.5 before any
	// sample; RTTs are estimated from it once it is at most 1.
	Error float64 `json:"error"`
	// Samples are the RTT samples taken in; Outliers those refused for a
	// peer coordinate inconsistent with its RTT.
	Samples  uint64 `json:"samples"`
	Outliers uint64 `json:"outliers"`
	// Peers is how many peers' coordinates it holds.
	Peers int `json:"peers"`
	// Vector is the coordinate's Euclidean part, in milliseconds.
	Vector []float64 `json:"vector"`
}

// LeaseSummary is the lease part of a status.
type LeaseSummary struct {
	// Active lists the leases running now (accepted or active).
	Active []LeaseView `json:"active"`
	Ended  int         `json:"ended"`
	// GPUsLeased of GPUsOffered are held by leases now, never more than
	// are offered; Utilisation is their ratio (0 when nothing is offered).
	GPUsLeased  int     `json:"gpus_leased"`
	GPUsOffered int     `json:"gpus_offered"`
	Utilisation float64 `json:"utilisation"`
	// GPUsBooked sums the GPUs of the leases that start later, one count
	// per lease.
	GPUsBooked int `json:"gpus_booked"`
	// Earned and Spent sum the ledger per currency, such as "12.40 USD".
	Earned []string `json:"earned"`
	Spent  []string `json:"spent"`
}

// TopicStatus counts the peers of one gossip topic.
type TopicStatus struct {
	Peers int `json:"peers"`
	Mesh  int `json:"mesh"`
}

// Peer is one element of GET /v1/peers.
type Peer struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	RTTMillis float64  `json:"rtt_ms"` // measured; 0 when not yet
	// EstimatedMillis is the RTT the two nodes' network coordinates put
	// between them (0: none yet), and CoordError the peer's coordinate's
	// error estimate (-1: its coordinate is not held). OutlierCoord marks
	// a peer whose coordinate contradicted its measured RTT: it is
	// ignored.
	EstimatedMillis float64 `json:"estimated_rtt_ms"`
	CoordError      float64 `json:"coordinate_error"`
	OutlierCoord    bool    `json:"coordinate_outlier,omitempty"`
	// Vector is the peer's coordinate's Euclidean part, in milliseconds
	// (absent when it is not held): the dashboard's plane projects it.
	Vector []float64 `json:"coordinate_vector,omitempty"`
	// Relayed: every connection to the peer goes through a relay.
	Relayed bool `json:"relayed"`
	// Reliability is this node's score of the peer as a provider, and
	// Basis what it rests on.
	Reliability float64 `json:"reliability"`
	Basis       string  `json:"basis"`
	// Near marks one of the network.near_peers connected peers of least
	// measured RTT, which the connection manager never trims.
	Near           bool      `json:"near"`
	Agent          string    `json:"agent"`
	Protocols      []string  `json:"protocols"`
	ConnectedSince time.Time `json:"connected_since"`
	Direction      string    `json:"direction"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}

// ReloadResult is what a reload of the node's config.toml did.
type ReloadResult struct {
	// Applied are the settings now in force ("provider.price").
	Applied []string `json:"applied"`
	// NeedRestart are settings that differ from those the node started
	// with and take effect only at its next start.
	NeedRestart []string `json:"need_restart"`
}
