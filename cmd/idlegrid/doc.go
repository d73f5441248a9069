// Command idlegrid is the CLI of a peer-to-peer market for GPU time: the
// daemon, the light renter, the inspection of a node and its repository,
// and devstack, a whole local swarm in one process. Run 'idlegrid --help'.
//
// It is flags and output only: it talks to a node through api.Node (the
// daemon's HTTP API, or a node in this process), turns each kind of
// failure into advice in one table (advice.go), and never imports p2p.
package main
