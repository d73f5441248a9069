// Command idlegrid is the peer daemon, light client and tools of the
// idlegrid GPU market: init, config, daemon, devstack, id, status, peers,
// swarm keygen and version. It owns flags and output only: it calls node
// (or a running daemon's local API) and never p2p's networking directly.
// main is one line so that run is testable.
package main
