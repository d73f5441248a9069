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
}

// LeaseSummary is the lease part of a status.
type LeaseSummary struct {
	// Active lists the leases running now (accepted or active).
	Active []LeaseView `json:"active"`
	Ended  int         `json:"ended"`
	// GPUsLeased of GPUsOffered are held by running leases now;
	// Utilisation is their ratio (0 when nothing is offered).
	GPUsLeased  int     `json:"gpus_leased"`
	GPUsOffered int     `json:"gpus_offered"`
	Utilisation float64 `json:"utilisation"`
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
	ID             string    `json:"id"`
	Addrs          []string  `json:"addrs"`
	RTTMillis      float64   `json:"rtt_ms"`
	Agent          string    `json:"agent"`
	Protocols      []string  `json:"protocols"`
	ConnectedSince time.Time `json:"connected_since"`
	Direction      string    `json:"direction"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}
