// Package trust is what this node believes of its peers, computed from
// what it can verify: its own lease records, the co-signed receipts it
// learns from providers (both parties' signatures, this swarm, the peer
// asked about), and what it saw (attestations that verified or failed,
// dials that failed, GPU UUIDs two peers claimed). Reputation publishes
// the scores whole for the matcher and the API; Challenger challenges a
// provider's attestation and judges the answer against the offer this
// node's book holds.
//
// It owns the stored observations and learned receipts. It reaches the
// swarm through ReceiptNet and ChallengeNet, declared here and
// implemented by the node's link. trust imports market (and
// market/reputation, which computes the scores), attest, p2p (the
// answer's type), internal/fanout, node/clock, node/metrics, node/offer
// and node/records; never node.
package trust
