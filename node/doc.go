// Package node assembles one idlegrid peer for one process: the repository
// (identity key, config.toml, swarm key, pebble datastore, lock), the libp2p
// host, DHT and rendezvous discovery, gossip and ping from package p2p, and
// the local HTTP API and metrics of package node/api. It owns the node's
// long-lived state and its lifecycle: New builds and starts nothing, Start
// brings the node up, Close takes it down in reverse order and waits.
//
// node may import p2p, market, attest and node/api. Nothing imports node
// except cmd and examples.
package node
