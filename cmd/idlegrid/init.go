package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
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
  provider   sells GPU time: DHT server, listens on port 4001; it sells the
             GPUs NVML reads here (gpu_source = "nvml"), and says so when
             it finds none
  renter     rents: DHT client, any free port, few connections
  bootstrap  helps others join: DHT server, many connections

--gpu-source says where a provider's GPUs come from instead of NVML:
fake:dgxh100 (also dgxa100, dgxh200, dgxb200) sells one of go-nvml's mock DGX
machines, attested like real ones, to try the market on a machine with no
GPU; static sells the GPUs listed by hand (config set provider.gpus, then
provider.enabled true), which no attestation backs: renters skip them
unless they rent with --no-attest.

A private swarm: generate a key once with 'idlegrid swarm keygen > swarm.key',
hand it to the members, and give each 'init --swarm NAME --swarm-key swarm.key'.`,
		Example: `  idlegrid init --profile provider
  idlegrid init --profile provider --gpu-source fake:dgxh100
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
			if err := checkGPUSourceFlag(o.Profile, o.GPUSource); err != nil {
				return err
			}
			note := e.chooseGPUSource(&o)
			r, err := repo.Init(e.repoPath(), o)
			if err != nil {
				return err
			}
			id, err := r.PeerID()
			if err != nil {
				return err
			}
			if e.asJSON {
				out := map[string]string{"repo": r.Path, "peer_id": id.String(), "profile": o.Profile}
				if o.Profile == config.ProfileProvider {
					out["gpu_source"], out["sells"] = cmp.Or(o.GPUSource, "static"), note
				}
				return e.printJSON(out)
			}
			fmt.Fprintf(e.stdout, "initialised a %s repository at %s\npeer ID: %s\n", o.Profile, r.Path, id)
			if note != "" {
				fmt.Fprintln(e.stdout, "this provider "+note)
			}
			fmt.Fprintf(e.stdout, "next: idlegrid daemon --repo %s\n", r.Path)
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
	f.StringVar(&o.GPUSource, "gpu-source", "", "a provider's GPUs: nvml, fake:dgxh100 (a mock machine, to try the market) or static (listed by hand, unattested); default: nvml when NVML finds GPUs here")
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

// checkGPUSourceFlag checks --gpu-source: a provider's, and one of the
// sources provider.gpu_source allows.
func checkGPUSourceFlag(profile, source string) error {
	if source == "" {
		return nil
	}
	if profile != config.ProfileProvider {
		return usagef("--gpu-source %q: only a provider sells GPUs (this is --profile %s)", source, profile)
	}
	c := config.DefaultConfig(profile)
	c.Provider.GPUSource = source
	if err := c.Validate(); err != nil {
		var fe *config.FieldError
		if errors.As(err, &fe) && fe.Field == "provider.gpu_source" {
			return usagef("--gpu-source %q: want %s", source, fe.Allowed)
		}
	}
	return nil
}

// localGPUs reads this machine's GPUs through NVML.
var localGPUs = func(ctx context.Context) (attest.Inventory, error) { return attest.LocalInventory(ctx, "") }

// chooseGPUSource picks a new provider repository's GPU source when none
// was asked for: NVML when it finds GPUs here, which the provider then
// sells; else it leaves the provider off and returns one line that says
// why, and what to do. It returns what the provider will sell.
func (e *env) chooseGPUSource(o *repo.InitOptions) string {
	if o.Profile != config.ProfileProvider {
		return ""
	}
	if o.GPUSource == "" {
		inv, err := localGPUs(e.ctx)
		why := inv.Unavailable
		if err != nil {
			why = oneLine(err)
		}
		if why == "" && len(inv.GPUs) == 0 {
			why = "NVML lists no GPU"
		}
		if why != "" {
			return fmt.Sprintf("sells nothing yet: no GPUs found through NVML (%s); on a GPU machine install the NVIDIA driver and run 'idlegrid config set provider.gpu_source nvml' then 'idlegrid config set provider.enabled true'; to try the market here, init again with --gpu-source fake:dgxh100 --force", why)
		}
		o.GPUSource = "nvml"
		return fmt.Sprintf("sells the %d GPUs NVML finds here (%s, driver %s); check the machine with 'idlegrid doctor'", len(inv.GPUs), inv.GPUs[0].Name, inv.DriverVersion)
	}
	switch {
	case o.GPUSource == "static":
		return "sells nothing yet: list the GPUs with 'idlegrid config set provider.gpus ...', then 'idlegrid config set provider.enabled true'; no attestation backs a list, so renters skip it unless they rent with --no-attest"
	case strings.HasPrefix(o.GPUSource, "fake:"):
		return fmt.Sprintf("sells the mock GPUs of %s (go-nvml's mock server, attested like real ones): for trying the market, not real hardware", strings.TrimPrefix(o.GPUSource, "fake:"))
	}
	return "sells the GPUs NVML reads here once the daemon runs"
}
