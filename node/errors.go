package node

import (
	"errors"
)

// Sentinel errors of package node.
var (
	// ErrRepoExists is returned by Init for an existing repository.
	ErrRepoExists = errors.New("repository already exists")
	// ErrNoRepo is returned when a repository has not been initialised.
	ErrNoRepo = errors.New("no repository")
	// ErrRepoLocked is returned when another process holds the repository.
	ErrRepoLocked = errors.New("repository is in use")
	// ErrIdentity is returned for an unusable identity key file.
	ErrIdentity = errors.New("invalid identity key")
	// ErrAPIListen is returned when the local API port cannot be bound.
	ErrAPIListen = errors.New("cannot start the local API")
	// ErrClosed is returned by calls on a node that is closing.
	ErrClosed = errors.New("node is closing")
	// ErrNoProvider is returned by Rent when no candidate took the lease.
	ErrNoProvider = errors.New("no provider took the lease")
	// ErrNotAttestable is a candidate whose offer names no attestation:
	// its GPUs are listed by hand (provider.gpus), not read through NVML.
	ErrNotAttestable = errors.New("its offer is not attestable (GPUs listed by hand, not read through NVML); rent --no-attest leases from such providers, trusting what they claim")
)
