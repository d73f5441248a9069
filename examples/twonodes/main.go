package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "twonodes:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "idlegrid-twonodes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var bootstrap []string
	var nodes []*node.Node
	for i := range 2 {
		r, err := repo.Init(filepath.Join(dir, fmt.Sprint(i)), repo.InitOptions{
			Profile: config.ProfileProvider, ListenPort: 0, APIPort: 0, Bootstrap: bootstrap,
		})
		if err != nil {
			return err
		}
		cfg, err := r.Config()
		if err != nil {
			return err
		}
		cfg.Network.Listen = config.ListenAddrs("127.0.0.1", 0, true)
		n, err := node.New(r, cfg, node.Options{Version: "example"})
		if err != nil {
			return err
		}
		if err := n.Start(ctx); err != nil {
			return err
		}
		defer n.Close()
		nodes = append(nodes, n)
		bootstrap = n.Addrs()[:1]
	}
	// Each node reports, through its own status, the peers in its gossip
	// mesh for offers: both are in one once they have met.
	offers := nodes[0].Swarm().Topic(p2p.TopicOffers)
	for nodes[0].Status().Topics[offers].Mesh == 0 || nodes[1].Status().Topics[offers].Mesh == 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no gossip mesh after 30s: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, n := range nodes {
		st := n.Status()
		fmt.Printf("%s sees %d peer(s); API at %s\n", st.PeerID, st.Peers, n.APIAddr())
	}
	return nil
}
