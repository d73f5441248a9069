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
}

// Reachability is how peers reach a node.
type Reachability struct {
	State string `json:"state"`
	How   string `json:"how"`
}

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
