package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newDevstackCmd is 'idlegrid devstack'. It is long for its help text
// and flags; the swarm it runs is devstack's own type.
func newDevstackCmd(e *env) *cobra.Command {
	var (
		nodes    int
		duration time.Duration
		keep     bool
		demo     bool
		settle   string
	)
	c := &cobra.Command{
		Use:   "devstack",
		Short: "Run a whole local swarm in one process and watch it form",
		Long: `Start N real idlegrid nodes in this process on loopback, each with its own
repository in a temporary folder, all bootstrapped from the first, and show
who sees whom until Ctrl-C (or --duration), then stop them and clean up.

Each node is a full node: TCP and QUIC, the DHT, rendezvous, gossip and its
own local API, so 'idlegrid status --repo <dir>' works against any of them.
Every node but the first is a provider with its own GPUs (fake DGX machines
on go-nvml's mock servers, or static lists), prices, region and windows, so
'offers', 'quote', 'bid' and 'rent' have a market to work on.

Leased jobs run as containers when a Docker engine answers (devstack imports
a tiny busybox image, idlegrid-test/busybox:1, from the host's static
busybox); with no engine, the devstack makes its swarm private and runs jobs
as plain processes, and says so. devstack prints the 'idlegrid rent' command
that rents from it; --demo runs one such rental itself and prints its
receipt. devstack makes its own repositories and ignores --repo.

Leases are paid by channel (settlement evm) on a development chain that
devstack runs in this process: go-ethereum's simulated backend, a real
EVM serving JSON-RPC on loopback, with the channel contract and a test
token deployed, every node's wallet given gas and the renter's 100 of the
token. The renter signs a voucher with each telemetry beat it verifies;
with --demo the provider then redeems them and its balance is printed.
--settlement ledger runs no chain (receipts are booked in each node's
ledger). Nothing leaves the machine.`,
		Example: `  idlegrid devstack
  idlegrid devstack --demo
  idlegrid devstack --nodes 10
  idlegrid devstack --nodes 3 --duration 20s   # stop by itself`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if nodes < 1 || nodes > 100 {
				return usagef("--nodes %d: want 1 to 100", nodes)
			}
			if demo && nodes < 2 {
				return usagef("--demo needs a provider: --nodes 2 or more")
			}
			if settle != config.SettleEVM && settle != config.SettleLedger {
				return usagef("--settlement %q: want evm (a development chain pays the leases) or ledger (no chain)", settle)
			}
			if duration < 0 {
				return usagef("--duration %s: want a positive duration, or 0 to run until Ctrl-C", duration)
			}
			if e.logLvl == "" {
				e.logLvl = "warn"
			}
			logCfg := config.DefaultConfig(config.ProfileProvider).Log
			logCfg.Subsystems[node.LogLibp2p] = "error" // nodes leaving make the DHT grumble
			if _, err := e.setupLogging(logCfg); err != nil {
				return err
			}
			ctx := e.ctx
			dir, err := os.MkdirTemp("", "idlegrid-devstack-")
			if err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(dir)
			}
			s := &devstack{e: e, dir: dir}
			defer s.close()
			if err := s.chooseJobs(ctx); err != nil {
				return err
			}
			if settle == config.SettleEVM {
				if err := s.startChain(); err != nil {
					return err
				}
			}
			if err := s.start(ctx, nodes); err != nil {
				return err
			}
			if err := s.makeRenter(ctx); err != nil {
				return err
			}
			if demo {
				if err := s.demo(ctx); err != nil {
					fmt.Fprintf(e.stderr, "idlegrid: demo: %v\n", err)
				}
			}
			if duration > 0 { // counted once the demo is done, which it never cuts short
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			s.watch(ctx)
			fmt.Fprintln(e.stdout, "stopping the devstack…")
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&nodes, "nodes", 5, "how many nodes to run (1 to 100)")
	f.DurationVar(&duration, "duration", 0, "stop after this long, counted after the demo with --demo (default: run until Ctrl-C)")
	f.BoolVar(&keep, "keep", false, "keep the nodes' repositories when done")
	f.BoolVar(&demo, "demo", false, "also rent from the devstack: run a job on a provider's fake GPUs and print its receipt (and, paid by channel, the provider's redeemed balance)")
	f.StringVar(&settle, "settlement", config.SettleEVM, "how the devstack's leases are paid: evm (payment channels on a development chain in this process) or ledger (no chain)")
	return c
}

type devstack struct {
	e   *env
	dir string
	// mu guards nodes and repos, filled in by the goroutines that start
	// the nodes and read by the live view; it is held for no I/O.
	mu     sync.Mutex
	nodes  []*node.Node
	repos  []string
	boot   string
	renter string // a renter repository, for the rent command it prints
	// How jobs run: the executor, the image rentals name, and for a
	// devstack with no Docker engine the private swarm's key.
	executor string
	image    string
	swarmKey []byte
	// chain pays the leases (settlement evm); nil: the ledger.
	chain *evm.DevChain
}

func (s *devstack) start(ctx context.Context, n int) error {
	s.nodes, s.repos = make([]*node.Node, n), make([]string, n)
	first, err := s.startNode(ctx, 0, nil)
	if err != nil {
		return err
	}
	boot := first.Addrs()
	s.boot = boot[0]
	fmt.Fprintf(s.e.stdout, "devstack: %d nodes in %s, bootstrap %s\n", n, s.dir, boot[0])
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.startNode(ctx, i, boot[:1])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *devstack) startNode(ctx context.Context, i int, bootstrap []string) (*node.Node, error) {
	path := filepath.Join(s.dir, fmt.Sprintf("node%02d", i))
	r, err := repo.Init(path, s.initOptions(config.ProfileProvider, bootstrap))
	if err != nil {
		return nil, err
	}
	cfg, err := r.Config()
	if err != nil {
		return nil, err
	}
	cfg.Network.Listen = config.ListenAddrs("127.0.0.1", 0, s.swarmKey == nil)
	cfg.Jobs.Executor = s.executor
	cfg.Jobs.HeartbeatInterval = config.Dur(time.Second)
	if i > 0 {
		cfg.Provider = devProvider(i - 1)
	}
	if err := s.settle(ctx, r, &cfg, nil); err != nil {
		return nil, err
	}
	if err := config.WriteConfig(r.ConfigPath(), cfg); err != nil {
		return nil, err
	}
	n, err := node.New(r, cfg, node.Options{Version: version, Logger: slogDefault().With("devnode", i), ProcessMetrics: i == 0})
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, fmt.Errorf("node %d: %w", i, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[i], s.repos[i] = n, path
	return n, nil
}

func (s *devstack) close() {
	defer func() {
		if s.chain != nil {
			s.chain.Close()
		}
	}()
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Close()
		}()
	}
	wg.Wait()
}

// watch redraws the view every second until ctx ends: in place on a
// terminal (the lines above it, what --demo printed, stay), else as a
// new block whenever it changes.
func (s *devstack) watch(ctx context.Context) {
	tty := false
	if f, ok := s.e.stdout.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := ""
	for {
		view := s.view()
		if tty {
			// Up over the last view, and clear from there down.
			if n := strings.Count(last, "\n"); n > 0 {
				fmt.Fprintf(s.e.stdout, "\033[%dA\r\033[J", n)
			}
			fmt.Fprint(s.e.stdout, view)
		} else if view != last {
			fmt.Fprint(s.e.stdout, view)
		}
		last = view
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// view renders who sees whom: one row per node, a column per node with
// # for a live connection, and the node's mesh and routing-table sizes.
func (s *devstack) view() string {
	s.mu.Lock()
	var nodes []*node.Node
	var repos []string
	for i, n := range s.nodes {
		if n != nil {
			nodes, repos = append(nodes, n), append(repos, s.repos[i])
		}
	}
	s.mu.Unlock()
	var b strings.Builder
	full := 0
	fmt.Fprintf(&b, "\nidlegrid devstack — %d nodes (Ctrl-C stops)\n\n", len(nodes))
	fmt.Fprintf(&b, "%-4s %-14s %-*s %5s %4s %5s %6s  %-28s %s\n", "node", "peer", len(nodes), "sees", "peers", "dht", "mesh", "offers", "sells", "api")
	ids := make([]string, len(nodes))
	stats := make([]api.Status, len(nodes))
	for i, n := range nodes {
		stats[i] = n.Status()
		ids[i] = stats[i].PeerID
	}
	for i, n := range nodes {
		sees := map[string]bool{}
		for _, p := range n.Peers() {
			sees[p.ID] = true
		}
		row := make([]byte, len(nodes))
		for j := range nodes {
			switch {
			case i == j:
				row[j] = '\\'
			case sees[ids[j]]:
				row[j] = '#'
			default:
				row[j] = '.'
			}
		}
		if len(sees) >= len(nodes)-1 {
			full++
		}
		st := stats[i]
		fmt.Fprintf(&b, "%-4d …%-13s %s %5d %4d %5d %6d  %-28s %s\n", i, st.PeerID[len(st.PeerID)-12:], row, st.Peers, st.RoutingTable, offersMesh(st), st.Offers, sells(i), n.APIAddr())
	}
	fmt.Fprintf(&b, "\n%d of %d nodes see every other node. # connected, . not; mesh = offers topic.\n", full, len(nodes))
	self := selfCommand()
	fmt.Fprintf(&b, "Ask any node: %s status --repo %s\n", self, repos[0])
	fmt.Fprintf(&b, "Shop:        %s offers --repo %s   %s quote --repo %s --gpu A100 --count 2 --hours 4\n", self, repos[0], self, repos[0])
	fmt.Fprintf(&b, "Rent:        %s\n", s.rentCommand())
	fmt.Fprintf(&b, "Look:        %s ui --repo %s   (the dashboard in a browser)\n", self, repos[0])
	return b.String()
}

// offersMesh is the node's mesh size on its swarm's offers topic.
func offersMesh(st api.Status) int {
	for topic, ts := range st.Topics {
		if strings.HasSuffix(topic, "/offers/1") {
			return ts.Mesh
		}
	}
	return 0
}

// devGPUs are the providers a devstack runs: varied GPUs, prices, regions,
// tiers and windows, so quote and offers have something to show.
// The DGX ones are fake machines on go-nvml's mock servers, read through
// the same NVML code as real GPUs, so they attest and meter; the others
// are static lists, which sell but cannot attest.
var devGPUs = []struct {
	source              string // gpu_source: a fake DGX, or static
	gpu                 config.GPUConfig
	price, gold, bronze string
	tiers               []string
	country, label      string
	weekly              []string
}{
	{"fake:dgxh100", config.GPUConfig{Model: "H100", Count: 8, VRAMGiB: 80}, "2.49", "", "1.60", []string{"silver", "bronze"}, "DE", "frankfurt", nil},
	{"fake:dgxa100", config.GPUConfig{Model: "A100", Count: 8, VRAMGiB: 40}, "0.99", "1.29", "0.69", []string{"gold", "silver", "bronze"}, "FR", "paris", nil},
	{"fake:dgxh200", config.GPUConfig{Model: "H200", Count: 8, VRAMGiB: 141}, "3.49", "3.99", "", []string{"gold", "silver"}, "SE", "stockholm", nil},
	{"static", config.GPUConfig{Model: "L40S", Count: 2, VRAMGiB: 48, ComputeCapability: "8.9", Interconnect: "pcie"}, "0.79", "", "0.49", []string{"bronze"}, "NL", "amsterdam", nil},
	{"static", config.GPUConfig{Model: "RTX4090", Count: 1, VRAMGiB: 24, ComputeCapability: "8.9", Interconnect: "pcie"}, "0.39", "", "", []string{"silver"}, "PL", "home-lab", []string{"Mon 18:00-Tue 08:00", "Sat 00:00-Sun 24:00"}},
	{"fake:dgxb200", config.GPUConfig{Model: "B200", Count: 8, VRAMGiB: 180}, "4.99", "", "", []string{"silver"}, "US", "us-east", nil},
}

func devProvider(i int) config.ProviderConfig {
	d := devGPUs[i%len(devGPUs)]
	p := config.DefaultProviderConfig()
	p.Enabled = true
	p.MinDuration = config.Dur(time.Minute)
	if p.GPUSource = d.source; d.source == "static" {
		p.GPUs = []config.GPUConfig{d.gpu}
	}
	p.Price, p.GoldPrice, p.BronzePrice = d.price, d.gold, d.bronze
	p.Tiers = d.tiers
	p.Country, p.RegionLabel = d.country, d.label
	if d.weekly != nil {
		p.Weekly = d.weekly
	}
	return p
}

// sells describes what devstack node i offers.
func sells(i int) string {
	if i == 0 {
		return "(bootstrap)"
	}
	d := devGPUs[(i-1)%len(devGPUs)]
	return fmt.Sprintf("%d×%s %s %s/h", d.gpu.Count, d.gpu.Model, d.country, d.price)
}
