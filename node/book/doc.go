// Package book keeps the node's share of the market: the book of offers
// every node holds (gossiped, and synced from peers when they join and
// now and then after), the signed envelopes it serves to peers that
// sync, the bids it waits on quotes for, and the offenders whose
// evidence it verified. One goroutine owns that state (Market, through
// internal/owner); matching runs on the book's immutable snapshots.
//
// It reaches the swarm through Syncer, declared here and implemented by
// the node's link, and is handed the gossip subscriptions and validator
// to read. book imports market, attest (to check evidence), p2p (topics,
// validators, sequence guards), internal/owner, node/api (a bid's
// matching weights) and node/clock; never node.
package book
