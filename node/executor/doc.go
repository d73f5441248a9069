// Package executor runs a lease's workload on the provider: a container
// through the Docker Engine API (Docker), or, for private swarms that opt
// in, a plain process (Process). Both sit behind Executor so the lease
// manager in node never knows which one runs.
//
// It owns the workload's life on this host: starting it with its limits,
// streaming its output, stopping it (SIGTERM, grace, SIGKILL) and finding
// again, after a provider restart, the containers it started.
//
// It must never import idlegrid's own packages: it knows images, commands,
// GPUs by UUID and limits, not leases, offers or peers. The lease ID it is
// given is only a name.
package executor
