package main

import (
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/spf13/cobra"
)

// shutdownLimit is how long the daemon may take to stop after a signal.
const shutdownLimit = 5 * time.Second

func newDaemonCmd(e *env) *cobra.Command {
	var light bool
	c := &cobra.Command{
		Use:   "daemon",
		Short: "Run a node: join the swarm, gossip, serve the local API",
		Long: `Run a node from the repository until SIGINT or SIGTERM.

The node listens on network.listen, dials network.bootstrap (and fails at once
if none answers), finds the rest of its swarm through the DHT and rendezvous,
joins the swarm's gossip topics, measures peers' round-trip times, and serves
the local API and /metrics on 127.0.0.1:api.port. A signal stops it within 5 s
with the datastore flushed and closed.`,
		Example: `  idlegrid daemon
  idlegrid daemon --repo /tmp/n2 --log-format json
  idlegrid daemon --light   # DHT client mode, as a renter's light client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			log, err := e.setupLogging(cfg.Log)
			if err != nil {
				return err
			}
			n, err := node.New(r, cfg, node.Options{Light: light, Version: version, Logger: log, ProcessMetrics: true, RetryBootstrap: true})
			if err != nil {
				return err
			}
			if err := n.Start(e.ctx); err != nil {
				if e.ctx.Err() != nil {
					return nil // interrupted while starting: nothing to report
				}
				return err
			}
			st := n.Status()
			log.Info("idlegrid daemon ready", "version", version, "peer", st.PeerID, "swarm", st.SwarmID, "api", n.APIAddr(), "addrs", n.Addrs())
			<-e.ctx.Done()
			log.Info("shutting down", "limit", shutdownLimit.String())
			done := make(chan error, 1)
			go func() { done <- n.Close() }()
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("shutdown: %w", err)
				}
				return nil
			case <-time.After(shutdownLimit):
				return fmt.Errorf("shutdown took longer than %s; the datastore may need recovery at the next start", shutdownLimit)
			}
		},
	}
	c.Flags().BoolVar(&light, "light", false, "run the DHT in client mode (a light client: queries, serves nothing)")
	return c
}
