// Package market is the pure core of idlegrid: the wire types of offers, bids,
// quotes, leases, receipts and evidence, their signing and validation, the
// order book and the matcher, and the provider's calendar.
//
// It has no network, no clock and no randomness of its own: callers pass
// `now` and seeds in, so its tests and benchmarks run without a host.
// market imports the standard library and its own packages (wire types,
// the GPU catalog, spell) only; it must never import p2p, attest, node or
// cmd.
//
// # Book
//
// A Book keeps offers and bids by (issuer, id); a message replaces another
// only with a higher seq, and a withdrawal or expiry leaves the seq behind
// so replays fail. Readers take a Snapshot: immutable, shared with the book
// shard by shard, and indexed by GPU model and country, each bucket sorted
// by price per tier.
//
// # Matching
//
// Matcher.Match is a reverse auction in the shape of a scheduler pipeline.
// Candidates come from the indexes: the buckets of the bid's models and
// allowed countries, merged in rising order of the bid tier's price and cut
// at the bid's maximum price and at the bid's GPU count and VRAM. Each
// candidate then passes the feasibility checks, each of which returns a
// reason when it fails ("vram 24 GiB < 40 GiB required"); Explain counts
// them over the whole book. Scorers rate a feasible offer in [0, 1]: price
// (1 − price/max), reliability, latency (rttRef/(rttRef+rtt)) and window
// fit (1 at the bid's earliest start, 0 at its latest), combined with the
// weights of MatchConfig.Weights. Candidates rank by effective price per
// GPU-hour, lowest first:
//
//	eff = price × (1 + α·(1 − reliability)) × (1 + β·rtt/rttRef)
//	      + price × staging / duration
//
// with the defaults α = 1, β = 0.5 and rttRef = 100 ms: a provider of
// reliability 0.9 pays a 10% penalty, one 100 ms away a 50% penalty.
// staging is the seconds a provider would take to fetch the bid's
// datasets it does not keep (Offer.datasets), at the download bandwidth
// its offer declares (100 Mbit/s where it declares none): the lease pays
// its GPUs for that time, spread over its duration. Equal
// effective prices go to the higher combined score (default weights: price
// 0.4, reliability 0.3, latency 0.2, window fit 0.1), then to the lower
// issuer and offer id, so a ranking is a total order and the same inputs
// always rank alike. The price is the tier's (tier_prices before
// price_micros), raised to the floor of the window the lease starts in.
//
// Reliability comes from a Reliability source (default: 1 for everyone)
// and RTT from an RTTs source (default: unknown). An unknown RTT ranks as
// the worst RTT the source has measured (WorstRTTs), at least RTTRef: a
// provider no one has measured, or one that cannot be reached, is never
// ranked nearer than one that has been. It passes a bid's max_rtt_ms:
// the limit applies to what has been measured or estimated. As eff ≥ price, the walk over the
// candidates stops at the first price above the k-th best effective price
// found so far, and never touches most of the book.
package market
