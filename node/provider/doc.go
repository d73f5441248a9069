// Package provider sells this node's GPUs: it reads them (NVML, a fake,
// or the configured list), builds and signs the offer and publishes it
// again when the GPUs, the terms, the coordinate or the reachability
// change, prices it under the pricing policy (verifying the issuers of
// the market it follows before they count), quotes the bids its offer
// fits (a lane per relay, and one apart for a relay's own bids), and
// answers attestation challenges with fresh and standing documents.
//
// It owns the provider's own book (its offer alone, which quoting and
// lease admission read), its offer's sequence numbers, the standing
// attestation and the start of the fill period in the datastore. The
// swarm reaches it through Publisher, declared here and implemented by
// the node's link; the node's book and trust come in as functions
// (Deps). provider imports market, attest, p2p (to serve challenges),
// node/clock, node/config, node/metrics and node/offer; never node.
package provider
