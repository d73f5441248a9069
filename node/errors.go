package node

import (
	"errors"

	"github.com/idlegrid/idlegrid/internal/owner"
)

// Sentinel errors of package node.
var (
	// ErrAPIListen is returned when the local API port cannot be bound.
	ErrAPIListen = errors.New("cannot start the local API")
	// ErrClosed is returned by calls on a node that is closing.
	ErrClosed = owner.ErrClosed
	// ErrNoProvider is returned by Rent when no candidate took the lease.
	ErrNoProvider = errors.New("no provider took the lease")
	// ErrNotAttestable is a candidate whose offer names no attestation:
	// its GPUs are listed by hand (provider.gpus), not read through NVML.
	// A rental that skips attestation (RentRequest.SkipAttest) leases
	// from such a provider.
	ErrNotAttestable = errors.New("its offer is not attestable (GPUs listed by hand, not read through NVML)")
)
