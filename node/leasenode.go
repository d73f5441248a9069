package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/p2p"
)

// newExecutor opens the executor [jobs] names: nil for none. Containers
// are labelled with this provider's peer ID, so providers sharing one
// engine never adopt or stop each other's jobs.
func (n *Node) newExecutor() (executor.Executor, error) {
	switch n.cfg.Jobs.Executor {
	case ExecutorDocker:
		id := n.host.ID().String()
		opts := []executor.DockerOption{executor.LabelPrefix("idlegrid-" + id[len(id)-12:])}
		if n.cfg.Jobs.DockerHost != "" {
			opts = append(opts, executor.DockerHost(n.cfg.Jobs.DockerHost))
		}
		return executor.NewDocker(opts...)
	case ExecutorProcess:
		dir := filepath.Join(n.repo.Path, "jobs")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return executor.NewProcess(executor.ProcessBaseDir(dir))
	}
	return nil, nil
}

// startLeases serves the lease and job protocols of a provider and picks
// up the leases a previous run left.
func (n *Node) startLeases(ctx context.Context, source attest.GPUSource) error {
	exec, err := n.newExecutor()
	if err != nil {
		return fmt.Errorf("jobs.executor: %w", err)
	}
	var inv *attest.Inventory
	if source != nil {
		i, err := source.Inventory(ctx)
		if err != nil {
			return fmt.Errorf("provider.gpu_source: %w", err)
		}
		inv = &i
	}
	if n.leases, err = newLeaseManager(ctx, n, exec, inv); err != nil {
		return err
	}
	if err := n.leases.recover(ctx); err != nil {
		n.log.Warn("leases not fully recovered", "err", err)
	}
	p2p.ServeLeases(n.host, n.leases.handle)
	p2p.ServeJobs(n.host, n.leases.attach)
	return nil
}
