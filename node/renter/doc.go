// Package renter rents for this node: it turns a request into a bid,
// gathers the offers that fit from the book (waiting for a few book
// syncs), ranks them by price, reliability and latency, walks the
// candidates (locating, challenging their attestation, sending or
// pulling the image, uploading inputs, proposing the lease), assembles
// micro-pools whose every pair is near, and follows each job to its
// receipt: output, verified beats, extensions, downloads, and the
// receipt it countersigns when it agrees with what it verified. After a
// restart it follows again the leases it had not seen end. LeaseLink is
// the renter's line to a lease it rented, from another process (exec,
// port-forward, cp, extend).
//
// It owns the renter's lease records (through node/records) and the
// jobs' output under the repository's logs folder. It reaches the swarm
// through Dealer, the book through Book and trust through Attester, each
// declared here and implemented by the node's link, node/book's Market
// and node/trust's Challenger, so it is tested without them. renter
// imports market, attest, p2p, internal/owner, node/api, node/clock,
// node/config, node/executor, node/fault, node/records, node/repo,
// node/transfer and node/views; never node, node/book or node/trust.
package renter
