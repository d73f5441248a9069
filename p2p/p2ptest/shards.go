package p2ptest

import (
	"fmt"
	"slices"

	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// WithShards has node i (Join's too, by its index) follow the shards
// follow(i) names: on each sharded kind (p2p.ShardedKinds) it subscribes
// to those shards instead of the kind's own topic, and keeps followers
// of each connected (p2p.Discovery.KeepShard). Where follow(i) is empty
// the node follows the kinds' own topics, as without the option.
func WithShards(follow func(i int) []string) Option {
	return func(c *config) { c.follow = follow }
}

// subscribe subscribes nd, whose gossip has started, to every topic kind
// (gossipsub grafts only subscribers into a mesh): to the kind's own
// topic, or, for a sharded kind, to the shards nd follows (WithShards).
func (s *Swarm) subscribe(nd *Node) error {
	if s.cfg.follow != nil {
		nd.Shards = s.cfg.follow(nd.index)
	}
	g := nd.Gossip
	for _, kind := range p2p.TopicKinds {
		topics := []*pubsub.Topic{g.Topic(kind)}
		if len(nd.Shards) > 0 && slices.Contains(p2p.ShardedKinds, kind) {
			topics = topics[:0]
			for _, sh := range nd.Shards {
				t, err := g.JoinShard(kind, sh)
				if err != nil {
					return err
				}
				topics = append(topics, t)
			}
		}
		for _, t := range topics {
			sub, err := t.Subscribe()
			if err != nil {
				return fmt.Errorf("subscribe %s: %w", t, err)
			}
			nd.drains.Add(1)
			go s.drain(nd, sub)
		}
	}
	return nil
}

// JoinShard has every node join one shard of a sharded kind and
// subscribe to it, beside what it follows already, as a node that starts
// to follow the shard does (without keeping its followers connected:
// here they are every node). Its mesh forms over the next heartbeats
// (WaitShardMesh).
func (s *Swarm) JoinShard(kind, shard string) error {
	for i, nd := range s.Nodes {
		t, err := nd.Gossip.JoinShard(kind, shard)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		sub, err := t.Subscribe()
		if err != nil {
			return fmt.Errorf("node %d: subscribe %s: %w", i, t, err)
		}
		nd.drains.Add(1)
		go s.drain(nd, sub)
	}
	return nil
}

// keepShards keeps followers of each shard nd follows connected; its
// discovery has started.
func keepShards(nd *Node) error {
	for _, sh := range nd.Shards {
		if err := nd.Discovery.KeepShard(sh, func() []peer.ID { return nd.Gossip.ShardPeers(p2p.TopicOffers, sh) }); err != nil {
			return err
		}
	}
	return nil
}
