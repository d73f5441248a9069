// Package node assembles one idlegrid peer for one process: the repository
// (identity key, config.toml, swarm key, pebble datastore, lock), the libp2p
// host, DHT and rendezvous discovery, gossip and ping from package p2p, the
// node's parts, and the local HTTP API and metrics of package node/api.
//
// Node only assembles. Its parts each get narrow dependencies (a key, a
// small interface of the swarm, the store, a clock, a logger) and no
// pointer back to it:
//
//   - the market side (market.go, marketrun.go, booksync.go): the book,
//     the envelopes handed to syncing peers, pending bids, offenders; one
//     owner goroutine, fed by the topic readers and book sync;
//   - the provider (provider.go, quotes.go): publishes the offer, quotes
//     bids, answers attestation challenges;
//   - the lease owner (leases.go, leasestart.go, jobrun.go, jobend.go):
//     calendars and live leases in one owner goroutine; admission is
//     check (outside) → reserve (owner) → countersign and store (outside)
//     → commit or release (owner); a supervisor goroutine per lease;
//   - the renter (rent.go, follow.go) and the challenger (attest.go).
//
// Units that separate cleanly are subpackages: node/clock (the time every
// part tells), node/records (lease records, receipts, the ledger),
// node/jobstream (a lease's job frames to its renter), node/executor
// (containers and processes), node/api (the HTTP API).
//
// New builds and starts nothing; Start starts the parts in one ordered
// list (lifecycle.go), and Close stops them in reverse and waits. No lock
// is held across I/O: state has one owner goroutine, and the few mutexes
// left guard small leaf caches, each saying why.
//
// node may import p2p, market, attest and its subpackages. Nothing imports
// node except cmd and examples.
package node
