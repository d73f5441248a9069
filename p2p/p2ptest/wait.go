package p2ptest

import (
	"context"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// pollInterval is how often the Wait methods look again.
const pollInterval = 25 * time.Millisecond

// WaitConnected waits until every node is connected to every other node.
// When ctx ends first, the error says how many pairs are still apart.
func (s *Swarm) WaitConnected(ctx context.Context) error {
	if err := poll(ctx, s.connectGap); err != nil {
		return fmt.Errorf("wait connected: %w", err)
	}
	return nil
}

// WaitMesh waits until, on each topic kind (all of p2p.TopicKinds when none
// are given), every node has at least MeshDegree(len(Nodes)) mutual mesh
// peers in the swarm and the mutual mesh links join all nodes into one
// graph. When ctx ends first, the error names the topic and the node that
// fall short.
func (s *Swarm) WaitMesh(ctx context.Context, kinds ...string) error {
	return s.WaitMeshOf(ctx, MeshDegree(len(s.Nodes)), kinds...)
}

// WaitMeshOf is WaitMesh with at least degree mutual mesh peers a node.
// A swarm whose connections a connection manager trims may rarely have
// every node at D_lo at one instant; one joined into one graph delivers
// every message all the same.
func (s *Swarm) WaitMeshOf(ctx context.Context, degree int, kinds ...string) error {
	if len(kinds) == 0 {
		kinds = p2p.TopicKinds
	}
	for _, kind := range kinds {
		if s.Nodes[0].Gossip.Topic(kind) == nil {
			return fmt.Errorf("wait mesh: unknown topic kind %q", kind)
		}
	}
	err := poll(ctx, func() string {
		for _, kind := range kinds {
			if gap := s.meshGap(kind, degree); gap != "" {
				return gap
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("wait mesh: %w", err)
	}
	return nil
}

// WaitShardMesh is WaitMeshOf for one shard of a sharded kind, which
// every node has joined (JoinShard).
func (s *Swarm) WaitShardMesh(ctx context.Context, degree int, kind, shard string) error {
	name := kind + "/" + shard
	err := poll(ctx, func() string {
		return s.meshGapOf(name, func(nd *Node) []peer.ID { return nd.Gossip.ShardMesh(kind, shard) }, degree)
	})
	if err != nil {
		return fmt.Errorf("wait mesh: %w", err)
	}
	return nil
}

// MeshDegree is the number of mesh peers WaitMesh waits for in a swarm of
// n nodes: gossipsub's D_lo (below it the heartbeat grafts more), or every
// other node in a smaller swarm.
func MeshDegree(n int) int {
	return min(n-1, pubsub.DefaultGossipSubParams().Dlo)
}

// poll calls gap at once and then every pollInterval until it returns ""
// (nothing missing) or ctx ends, in which case the error holds gap's last
// answer and ctx's error.
func poll(ctx context.Context, gap func() string) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		missing := gap()
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", missing, ctx.Err())
		case <-t.C:
		}
	}
}

// connectGap says how many pairs of nodes are not connected (as seen from
// both ends), or "" when none.
func (s *Swarm) connectGap() string {
	missing, pairs := 0, 0
	var first [2]int
	for i, a := range s.Nodes {
		for j := i + 1; j < len(s.Nodes); j++ {
			b := s.Nodes[j]
			pairs++
			if a.Host.Network().Connectedness(b.Host.ID()) == network.Connected &&
				b.Host.Network().Connectedness(a.Host.ID()) == network.Connected {
				continue
			}
			if missing == 0 {
				first = [2]int{i, j}
			}
			missing++
		}
	}
	if missing == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d pairs not connected (first: nodes %d and %d)", missing, pairs, first[0], first[1])
}

// meshGap checks one topic's mesh: the degree of every node, counting only
// links both ends have grafted, and that those links join all nodes.
// It returns what falls short, or "" when nothing does.
func (s *Swarm) meshGap(kind string, want int) string {
	return s.meshGapOf(kind, func(nd *Node) []peer.ID { return nd.Gossip.Mesh(kind) }, want)
}

// meshGapOf is meshGap for the mesh that mesh returns of each node, on
// a topic called name.
func (s *Swarm) meshGapOf(name string, mesh func(*Node) []peer.ID, want int) string {
	index := make(map[peer.ID]int, len(s.Nodes))
	meshes := make([]map[peer.ID]bool, len(s.Nodes))
	for i, nd := range s.Nodes {
		index[nd.Host.ID()] = i
		meshes[i] = make(map[peer.ID]bool)
		for _, p := range mesh(nd) {
			meshes[i][p] = true
		}
	}
	adj := make([][]int, len(s.Nodes))
	for i, nd := range s.Nodes {
		for p := range meshes[i] {
			if j, ok := index[p]; ok && meshes[j][nd.Host.ID()] {
				adj[i] = append(adj[i], j)
			}
		}
		if len(adj[i]) < want {
			return fmt.Sprintf("topic %s: node %d has %d mutual mesh peers, want at least %d", name, i, len(adj[i]), want)
		}
	}
	if i := unreachable(adj); i >= 0 {
		return fmt.Sprintf("topic %s: mesh not connected: node %d is unreachable from node 0", name, i)
	}
	return ""
}

// unreachable returns the first node that a breadth-first search from node
// 0 over adj does not reach, or -1 when it reaches them all.
func unreachable(adj [][]int) int {
	seen := make([]bool, len(adj))
	seen[0] = true
	queue := []int{0}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, j := range adj[i] {
			if !seen[j] {
				seen[j] = true
				queue = append(queue, j)
			}
		}
	}
	for i, ok := range seen {
		if !ok {
			return i
		}
	}
	return -1
}
