// Package market is the pure core of idlegrid: the wire types of offers, bids,
// quotes, leases, receipts and evidence, their signing and validation, the
// order book and the matcher, and the provider's calendar.
//
// It has no network, no clock and no randomness of its own: callers pass
// `now` and seeds in, so its tests and benchmarks run without a host.
// market imports the standard library and its own wire types only; it must
// never import p2p, attest, node or cmd.
package market
