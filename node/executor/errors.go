package executor

import "errors"

// Errors an executor returns; callers test for them with errors.Is.
var (
	// ErrUnknownImage: the image a spec names is not present on this
	// provider (Check pulls nothing: a lease must not wait on a registry;
	// Pull, before the lease, does).
	ErrUnknownImage = errors.New("unknown image")
	// ErrNotFound: no workload exists for the lease asked about.
	ErrNotFound = errors.New("no such job")
	// ErrNoEngine: the container engine cannot be reached.
	ErrNoEngine = errors.New("no container engine")
	// ErrNoGPUSupport: the spec asks for GPUs and the engine cannot hand
	// them to a container (Docker without the NVIDIA container toolkit).
	ErrNoGPUSupport = errors.New("engine cannot attach gpus")
)
