package p2p

import "errors"

// Sentinel errors of package p2p. Callers test them with errors.Is; the
// wrapped text names the offending value.
var (
	// ErrSwarmKey is returned for a swarm key file that is not a libp2p PSK.
	ErrSwarmKey = errors.New("invalid swarm key")
	// ErrBootstrapAddr is returned for a bootstrap address that cannot be used.
	ErrBootstrapAddr = errors.New("invalid bootstrap address")
	// ErrNoBootstrap is returned when no configured bootstrap peer answered.
	ErrNoBootstrap = errors.New("no bootstrap peer reachable")
	// ErrListen is returned when a listen address cannot be bound.
	ErrListen = errors.New("cannot listen")
	// ErrSwarmName is returned for a swarm name outside the allowed alphabet.
	ErrSwarmName = errors.New("invalid swarm name")
	// ErrShard is returned for a shard name outside the allowed alphabet.
	ErrShard = errors.New("invalid shard")
)
