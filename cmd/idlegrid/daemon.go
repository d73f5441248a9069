package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// shutdownLimit is how long the daemon may take to stop after a signal.
const shutdownLimit = 5 * time.Second

// newDaemonCmd is 'idlegrid daemon'. It is long for its help text, its
// flags and the daemon's loop of signals (SIGHUP reloads, SIGINT and
// SIGTERM stop within shutdownLimit), which read best in one place.
func newDaemonCmd(e *env) *cobra.Command {
	var (
		light     bool
		initAs    string
		bootstrap []string
	)
	c := &cobra.Command{
		Use:   "daemon",
		Short: "Run a node: join the swarm, gossip, serve the local API",
		Long: `Run a node from the repository until SIGINT or SIGTERM.

The node listens on network.listen, dials network.bootstrap (when none answers
it starts anyway and dials them again, 1 s later and backing off to
dht.rebootstrap_interval), finds the rest of its swarm through the DHT and
rendezvous, joins the swarm's gossip topics, measures peers' round-trip times,
and serves the local API and /metrics on 127.0.0.1:api.port. SIGINT or SIGTERM
stops it within 5 s with the datastore flushed and closed.

SIGHUP reloads config.toml: the provider's terms (prices, windows, tiers,
durations, workload and image policy, caps, a static GPU list) take effect at
once in a new offer; other changed settings are named in the log and wait for a
restart; an invalid file is refused and the node runs on as it was.
'idlegrid config set' asks for the same reload through the local API.

--init PROFILE creates the repository first when there is none (a service's
first start, a container's empty volume), with --bootstrap peers in its
config; an existing repository is used as it is, and --bootstrap must then be
set in its config.toml instead.`,
		Example: `  idlegrid daemon
  idlegrid daemon --repo /tmp/n2 --log-format json
  idlegrid daemon --light   # DHT client mode, as a renter's light client
  idlegrid daemon --repo /var/lib/idlegrid --init provider --bootstrap /dns4/boot.example.org/tcp/4001/p2p/12D3KooW…`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := e.initIfAbsent(initAs, bootstrap); err != nil {
				return err
			}
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
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
		running:
			for {
				select {
				case <-e.ctx.Done():
					break running
				case <-hup:
					reload(n, log)
				}
			}
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
	f := c.Flags()
	f.BoolVar(&light, "light", false, "run the DHT in client mode (a light client: queries, serves nothing)")
	f.StringVar(&initAs, "init", "", "create the repository with this `PROFILE` (provider, renter, bootstrap) when there is none")
	f.StringArrayVar(&bootstrap, "bootstrap", nil, "with --init, a bootstrap peer `MULTIADDR` for the new repository's config (repeatable)")
	return c
}

// initIfAbsent creates the repository with profile and bootstrap peers
// when none exists; with no profile it requires that bootstrap be empty.
func (e *env) initIfAbsent(profile string, bootstrap []string) error {
	if profile == "" {
		if len(bootstrap) > 0 {
			return usagef("--bootstrap needs --init PROFILE: an existing repository takes its bootstrap peers from network.bootstrap in config.toml")
		}
		return nil
	}
	if !slices.Contains(config.Profiles, profile) {
		return usagef("--init %q: want one of %v", profile, config.Profiles)
	}
	if err := checkBootstrapFlags(profile, bootstrap); err != nil {
		return err
	}
	path := e.repoPath()
	if (&repo.Repo{Path: path}).Exists() {
		if len(bootstrap) > 0 {
			fmt.Fprintf(e.stderr, "a repository exists at %s: --bootstrap is not written into it (edit network.bootstrap in its config.toml)\n", path)
		}
		return nil // a partial one fails to open, with the reason
	}
	o := repo.InitOptions{Profile: profile, ListenPort: -1, APIPort: -1, Bootstrap: bootstrap}
	note := e.chooseGPUSource(&o)
	r, err := repo.Init(path, o)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintf(e.stderr, "the new provider %s\n", note)
	}
	id, err := r.PeerID()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "initialised a %s repository at %s, peer ID %s\n", profile, r.Path, id)
	return nil
}

// reload reads the repository's config again and hands it to the node.
func reload(n *node.Node, log *slog.Logger) {
	if _, err := n.ReloadFile(); err != nil {
		log.Error("configuration not reloaded; the node runs on as it was", "err", err)
	}
}
