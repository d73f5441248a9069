// Package swarm is the node's adapter over libp2p: Link publishes and
// awaits the gossip mesh, sends quotes (finding a renter first), fetches
// books, evidence and receipts, and opens the lease, image, upload,
// download and job streams, implementing the small interface each
// component declares for what it calls. RTTs gives the matcher the
// measured latency, estimates from network coordinates, and the check
// of a claimed country against them; RelayVouch decides whom this node's
// relay reserves a slot for.
//
// swarm owns no state of its own but RelayVouch's sources. It imports
// market, p2p, node/clock and node/offer; never node or a component.
package swarm
