// Package node assembles one idlegrid peer for one process, and owns
// nothing else: the repository (node/repo), the libp2p host, DHT and
// rendezvous discovery, gossip and ping from package p2p, the node's
// rooms, and the local HTTP API and metrics (node/api, node/metrics).
//
// Everything a node does lives in a room of its own, a package under
// node that imports none above it and talks to another through a small
// interface declared where it is used, never a pointer back to the node:
//
//   - node/book: the book's owner goroutine and book sync;
//   - node/provider: the offer, quoting, pricing, the GPU source;
//   - node/lease: the provider's side of a lease, from admission to the
//     receipt, the lease table in one owner goroutine;
//   - node/renter: bids, rentals, micro-pools, following a job, and the
//     line to a rented lease from another process; it sees the book and
//     trust through its own Book and Attester;
//   - node/trust: reputation, learned receipts, the challenger;
//   - node/swarm: the adapter over host, gossip and discovery that
//     implements each room's view of the swarm, with RTTs and the relay's
//     vouching;
//   - node/doctor: a provider's checks.
//
// Leaves below them: node/offer (building and pricing an offer),
// node/views (api views of what the node holds), node/fault (kinds of
// failure), node/config, node/repo, node/records, node/jobstream,
// node/transfer, node/executor, node/clock, node/ui.
//
// Here: New builds and starts nothing; Start runs the ordered start list
// (lifecycle.go) over the rooms wired in parts.go, and Close stops them in
// reverse and waits. backend.go and rentals.go are the api.Backend's
// methods over the rooms (Node.API is the in-process api.Node), status.go
// the status, reload.go SIGHUP, metrics_collect.go the metrics read from
// the rooms, locality.go the node's RTTs and coordinate. No lock is held
// across I/O.
//
// node may import p2p, market, attest, internal and its subpackages.
// Nothing imports node except cmd and examples.
package node
