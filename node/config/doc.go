// Package config is a node's configuration: the TOML file's sections
// (network, NAT, DHT, gossip, provider, jobs, API, log), their defaults
// per profile, and the validation that names each bad field, the value
// found and what is allowed (FieldError, an ErrConfig). It reads and
// writes the file whole (ParseConfig, LoadConfig, WriteConfig) and keys
// by dotted name (Get, Set) for `idlegrid config`.
//
// It owns no state and does no I/O but the file's. It may import market
// (prices, tiers, limits), p2p and node/executor (the defaults and
// checks of their settings) and internal packages; no room of node.
package config
