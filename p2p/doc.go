// Package p2p owns idlegrid's libp2p side: the host (TCP and QUIC, TLS and
// Noise, yamux, the resource and connection managers, the private-swarm PSK
// and allow-list gater), discovery (kad-dht under a per-swarm protocol
// prefix plus rendezvous through routing discovery), the swarm's gossipsub
// topics, and latency measurement with libp2p ping.
//
// It holds no long-lived application state: node assembles these parts and
// owns what they produce. p2p may import market (wire types only) and attest
// (verification only); it must never import node or cmd.
package p2p
