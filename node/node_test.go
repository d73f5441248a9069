package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// testRepo creates a repository on loopback with free ports; edit adjusts
// the config before it is written.
func testRepo(t testing.TB, name string, edit func(*Config)) *Repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	r, err := Init(dir, InitOptions{Profile: ProfileProvider, ListenPort: 0, APIPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Network.Listen = ListenAddrs("127.0.0.1", 0, true)
	cfg.Log.Subsystems["libp2p"] = "error"
	if edit != nil {
		edit(&cfg)
	}
	if err := WriteConfig(r.ConfigPath(), cfg); err != nil {
		t.Fatal(err)
	}
	return r
}

// startNode starts a node from r and closes it when the test ends.
func startNode(t testing.TB, r *Repo) *Node {
	t.Helper()
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(r, cfg, Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNodesFindEachOtherThroughOneBootstrapPeer(t *testing.T) {
	boot := startNode(t, testRepo(t, "boot", nil))
	bootAddr := boot.Addrs()[0]
	var nodes []*Node
	for i := range 5 {
		r := testRepo(t, "n"+string(rune('a'+i)), func(c *Config) { c.Network.Bootstrap = []string{bootAddr} })
		nodes = append(nodes, startNode(t, r))
	}
	all := append([]*Node{boot}, nodes...)
	waitFor(t, 30*time.Second, "every node connected to every other", func() bool {
		for _, a := range all {
			for _, b := range all {
				if a != b && len(a.Host().Network().ConnsToPeer(b.Host().ID())) == 0 {
					return false
				}
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "every node in a mesh on every topic", func() bool {
		for _, a := range all {
			for _, kind := range p2p.TopicKinds {
				if len(a.Gossip().Mesh(kind)) == 0 {
					return false
				}
			}
		}
		return true
	})
	st := nodes[4].Status()
	if st.Peers != 5 {
		t.Errorf("status peers = %d, want 5", st.Peers)
	}
	_ = peer.ID("")
}
