// Package repo is a node's repository on disk: the folder that holds its
// identity key, its configuration (config.toml), its swarm key, its
// pebble datastore, the local API's token and address files, and the
// lock that keeps a second process out (Init, Open, Lock). It creates
// them (Init writes each file whole, through internal/atomicfile) and
// reads them back, checked.
//
// It may import node/config, node/api (the token's format), p2p (swarm
// keys and names) and internal packages; no room of node's.
package repo
