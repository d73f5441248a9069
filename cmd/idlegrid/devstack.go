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
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newDevstackCmd(e *env) *cobra.Command {
	var (
		nodes    int
		duration time.Duration
		keep     bool
	)
	c := &cobra.Command{
		Use:   "devstack",
		Short: "Run a whole local swarm in one process and watch it form",
		Long: `Start N real idlegrid nodes in this process on loopback, each with its own
repository in a temporary folder, all bootstrapped from the first, and show
who sees whom until Ctrl-C (or --duration), then stop them and clean up.

Each node is a full node: TCP and QUIC, the DHT, rendezvous, gossip and its
own local API, so 'idlegrid status --repo <dir>' works against any of them.`,
		Example: `  idlegrid devstack
  idlegrid devstack --nodes 10
  idlegrid devstack --nodes 3 --duration 20s   # stop by itself`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if nodes < 1 || nodes > 100 {
				return usagef("--nodes %d: want 1 to 100", nodes)
			}
			if duration < 0 {
				return usagef("--duration %s: want a positive duration, or 0 to run until Ctrl-C", duration)
			}
			if e.logLvl == "" {
				e.logLvl = "warn"
			}
			logCfg := node.DefaultConfig(node.ProfileProvider).Log
			logCfg.Subsystems[node.LogLibp2p] = "error" // nodes leaving make the DHT grumble
			if _, err := e.setupLogging(logCfg); err != nil {
				return err
			}
			ctx := e.ctx
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			dir, err := os.MkdirTemp("", "idlegrid-devstack-")
			if err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(dir)
			}
			s := &devstack{e: e, dir: dir}
			defer s.close()
			if err := s.start(ctx, nodes); err != nil {
				return err
			}
			s.watch(ctx)
			fmt.Fprintln(e.stdout, "stopping the devstack…")
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&nodes, "nodes", 5, "how many nodes to run (1 to 100)")
	f.DurationVar(&duration, "duration", 0, "stop after this long (default: run until Ctrl-C)")
	f.BoolVar(&keep, "keep", false, "keep the nodes' repositories when done")
	return c
}

type devstack struct {
	e     *env
	dir   string
	nodes []*node.Node
	repos []string
	mu    sync.Mutex
}

func (s *devstack) start(ctx context.Context, n int) error {
	first, err := s.startNode(ctx, 0, nil)
	if err != nil {
		return err
	}
	boot := first.Addrs()
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
	r, err := node.Init(path, node.InitOptions{Profile: node.ProfileProvider, ListenPort: 0, APIPort: 0, Bootstrap: bootstrap})
	if err != nil {
		return nil, err
	}
	cfg, err := r.Config()
	if err != nil {
		return nil, err
	}
	cfg.Network.Listen = node.ListenAddrs("127.0.0.1", 0, true)
	if err := node.WriteConfig(r.ConfigPath(), cfg); err != nil {
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
	s.nodes = append(s.nodes, n)
	s.repos = append(s.repos, path)
	return n, nil
}

func (s *devstack) close() {
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Close()
		}()
	}
	wg.Wait()
}

// watch redraws the view every second until ctx ends: in place on a
// terminal, else as a new block whenever it changes.
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
			fmt.Fprint(s.e.stdout, "\033[H\033[2J"+view)
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
// ● for a live connection, and the node's mesh and routing-table sizes.
func (s *devstack) view() string {
	s.mu.Lock()
	nodes := append([]*node.Node(nil), s.nodes...)
	repos := append([]string(nil), s.repos...)
	s.mu.Unlock()
	var b strings.Builder
	full := 0
	fmt.Fprintf(&b, "\nidlegrid devstack — %d nodes (Ctrl-C stops)\n\n", len(nodes))
	fmt.Fprintf(&b, "%-4s %-14s %-*s %5s %4s %5s  %s\n", "node", "peer", len(nodes), "sees", "peers", "dht", "mesh", "api")
	for i, n := range nodes {
		row := make([]byte, 0, len(nodes))
		sees := 0
		for j, m := range nodes {
			switch {
			case i == j:
				row = append(row, '\\')
			case len(n.Host().Network().ConnsToPeer(m.Host().ID())) > 0:
				row = append(row, '#')
				sees++
			default:
				row = append(row, '.')
			}
		}
		if sees == len(nodes)-1 {
			full++
		}
		st := n.Status()
		mesh := st.Topics[n.Swarm().Topic(p2p.TopicOffers)].Mesh
		id := st.PeerID
		fmt.Fprintf(&b, "%-4d …%-13s %s %5d %4d %5d  %s\n", i, id[len(id)-12:], row, st.Peers, st.RoutingTable, mesh, n.APIAddr())
	}
	fmt.Fprintf(&b, "\n%d of %d nodes see every other node. # connected, . not; mesh = offers topic.\n", full, len(nodes))
	fmt.Fprintf(&b, "Ask any node: idlegrid status --repo %s\n", repos[0])
	return b.String()
}
