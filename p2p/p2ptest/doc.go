// Package p2ptest spins up swarms of idlegrid p2p stacks for tests: N
// nodes, each a libp2p host with the swarm's kad-dht discovery and
// gossipsub topics from package p2p, either on mocknet with real-world
// per-link latencies from a PlanetLab RTT matrix, or on real TCP and QUIC
// transports over loopback. It owns the harness (building, bootstrapping,
// waiting for connectivity and meshes, tearing down) and the loader of
// latency matrices; it owns no protocol logic. Simulate runs a mocknet
// swarm on a virtual clock (a testing/synctest bubble), so that what it
// times is the links' and the protocol's, not the machine's.
//
// It builds on package p2p directly and must never import node or cmd:
// node assembles the same parts for the daemon, and tests of node, cmd and
// later packages use this harness, not the other way round.
package p2ptest
