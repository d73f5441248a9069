package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// newInitCmd is 'idlegrid init'. It is long for its help text and its
// flags' checks, each naming the flag, its value and what is allowed.
func newInitCmd(e *env) *cobra.Command {
	var (
		o       repo.InitOptions
		keyFile string
	)
	c := &cobra.Command{
		Use:   "init",
		Short: "Create a node repository: identity key, config and datastore",
		Long: `Create a node repository (default ~/.idlegrid, or $IDLEGRID_PATH, or --repo):
an Ed25519 identity key (mode 0600), config.toml with every setting and its
default, and the pebble datastore. An existing repository is left alone
unless --force, which moves its files into a backup folder inside it.

Profiles:
  provider   sells GPU time: DHT server, listens on port 4001
  renter     rents: DHT client, any free port, few connections
  bootstrap  helps others join: DHT server, many connections

A private swarm: generate a key once with 'idlegrid swarm keygen > swarm.key',
hand it to the members, and give each 'init --swarm NAME --swarm-key swarm.key'.`,
		Example: `  idlegrid init --profile provider
  idlegrid init --repo /tmp/n2 --listen-port 4002 --api-port 5082 --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…
  idlegrid init --swarm lab-gpus --swarm-key swarm.key`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !slices.Contains(config.Profiles, o.Profile) {
				return usagef("--profile %q: want one of %v", o.Profile, config.Profiles)
			}
			if o.ListenPort < -1 || o.ListenPort > 65535 {
				return usagef("--listen-port %d: want 0 to 65535", o.ListenPort)
			}
			if o.APIPort < -1 || o.APIPort > 65535 {
				return usagef("--api-port %d: want 0 to 65535", o.APIPort)
			}
			if o.Swarm != "" {
				if err := repo.CheckSwarmName(o.Swarm); err != nil {
					return usageError{fmt.Errorf("--swarm: %w", err)}
				}
			}
			if keyFile != "" {
				data, err := os.ReadFile(keyFile)
				if err != nil {
					return fmt.Errorf("--swarm-key: %w", err)
				}
				if err := repo.CheckSwarmKey(data); err != nil {
					return fmt.Errorf("--swarm-key %s: %w", keyFile, err)
				}
				if o.Swarm == "" || repo.IsPublicSwarm(o.Swarm) {
					return usagef("--swarm-key needs --swarm NAME: a private swarm has a name of its own")
				}
				o.SwarmKey = data
			}
			if err := checkBootstrapFlags(o.Profile, o.Bootstrap); err != nil {
				return err
			}
			r, err := repo.Init(e.repoPath(), o)
			if err != nil {
				return err
			}
			id, err := r.PeerID()
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(map[string]string{"repo": r.Path, "peer_id": id.String(), "profile": o.Profile})
			}
			fmt.Fprintf(e.stdout, "initialised a %s repository at %s\npeer ID: %s\nnext: idlegrid daemon --repo %s\n", o.Profile, r.Path, id, r.Path)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Profile, "profile", config.ProfileProvider, "provider, renter or bootstrap")
	f.StringVar(&o.Swarm, "swarm", "", "swarm name (default public)")
	f.StringVar(&keyFile, "swarm-key", "", "pre-shared key `FILE` of a private swarm (from 'idlegrid swarm keygen')")
	f.IntVar(&o.ListenPort, "listen-port", -1, "P2P port for TCP and QUIC: 0 picks a free one (default: the profile's, 4001 or free)")
	f.IntVar(&o.APIPort, "api-port", -1, "local API port: 0 picks a free one (default: 5080)")
	f.StringArrayVar(&o.Bootstrap, "bootstrap", nil, "bootstrap peer `MULTIADDR` ending in /p2p/<peer ID> (repeatable)")
	f.BoolVar(&o.Force, "force", false, "start afresh over an existing repository, keeping its old files in a backup folder")
	addJSONFlag(c, e)
	return c
}

// checkBootstrapFlags checks each --bootstrap value as a profile's config
// would hold it.
func checkBootstrapFlags(profile string, bootstrap []string) error {
	for i, b := range bootstrap {
		c := config.DefaultConfig(profile)
		c.Network.Bootstrap = []string{b}
		if err := c.Validate(); err != nil {
			return usagef("--bootstrap %q (number %d): want a multiaddr ending in /p2p/<peer ID>", b, i+1)
		}
	}
	return nil
}
