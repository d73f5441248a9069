package p2ptest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

// Deliver publishes one message on topic kind from each node in from, one
// after another, gap apart, and waits until every node has received every
// message. It returns each (message, receiving node) pair's delay from
// publication, the publisher's own copy excluded. When ctx ends first, the
// error says how many deliveries are missing and names the first.
func (s *Swarm) Deliver(ctx context.Context, kind string, from []int, gap time.Duration) ([]time.Duration, error) {
	each, err := s.DeliverEach(ctx, kind, from, gap)
	return flatten(each, from), err
}

// DeliverEach is Deliver that says which delay is whose: the delay of
// message k at node i is [k][i], -1 where it did not arrive, 0 at its
// publisher.
func (s *Swarm) DeliverEach(ctx context.Context, kind string, from []int, gap time.Duration) ([][]time.Duration, error) {
	return s.deliverEach(ctx, func(nd *Node) *pubsub.Topic { return nd.Gossip.Topic(kind) }, from, gap)
}

// DeliverOnShard is Deliver on one shard's topic of a sharded kind
// (p2p.ShardedKinds), which every node has joined (JoinShard): each
// message is published there alone. Each topic has a mesh of its own,
// which gossipsub grafts at random from the same connections, so a
// shard every node follows times another mesh on the same swarm.
func (s *Swarm) DeliverOnShard(ctx context.Context, kind, shard string, from []int, gap time.Duration) ([]time.Duration, error) {
	for i, nd := range s.Nodes {
		if nd.Gossip.ShardTopic(kind, shard) == nil {
			return nil, fmt.Errorf("deliver on shard %s: node %d has not joined it", shard, i)
		}
	}
	each, err := s.deliverEach(ctx, func(nd *Node) *pubsub.Topic { return nd.Gossip.ShardTopic(kind, shard) }, from, gap)
	return flatten(each, from), err
}

// flatten is DeliverEach's delays as Deliver returns them.
func flatten(each [][]time.Duration, from []int) []time.Duration {
	var delays []time.Duration
	for k := range each {
		for i, d := range each[k] {
			if i != from[k] && d >= 0 {
				delays = append(delays, d)
			}
		}
	}
	return delays
}

// deliverEach is DeliverEach on the topic topic returns for each node.
func (s *Swarm) deliverEach(ctx context.Context, topic func(*Node) *pubsub.Topic, from []int, gap time.Duration) ([][]time.Duration, error) {
	arrivals := make(chan arrival, len(from)*len(s.Nodes))
	index := map[string]int{}
	payloads := make([][]byte, len(from))
	stamp := time.Now().UnixNano()
	for k, i := range from {
		payloads[k] = fmt.Appendf(nil, "deliver %d from node %d at %d", k, i, stamp)
		if pad := s.DeliverBytes - len(payloads[k]); pad > 0 {
			payloads[k] = append(payloads[k], make([]byte, pad)...)
		}
		index[string(payloads[k])] = k
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait: it ends the readers
	for i, nd := range s.Nodes {
		t := topic(nd)
		sub, err := t.Subscribe()
		if err != nil {
			return nil, fmt.Errorf("deliver: node %d: subscribe %s: %w", i, t, err)
		}
		collect(rctx, &wg, sub, index, i, arrivals)
	}
	sent, err := s.publishEach(rctx, topic, from, payloads, gap)
	if err != nil {
		return nil, err
	}
	delays := make([][]time.Duration, len(from))
	for k := range delays {
		delays[k] = make([]time.Duration, len(s.Nodes))
		for i := range delays[k] {
			delays[k][i] = -1
		}
	}
	for want := len(from) * len(s.Nodes); want > 0; want-- {
		select {
		case a := <-arrivals:
			d := a.at.Sub(sent[a.msg])
			if from[a.msg] == a.node {
				d = 0 // the publisher's own copy
			}
			delays[a.msg][a.node] = d
		case <-ctx.Done():
			for k := range delays {
				for i, d := range delays[k] {
					if d < 0 {
						return delays, fmt.Errorf("deliver: %d of %d deliveries missing (first: message %d from node %d at node %d): %w",
							want, len(from)*len(s.Nodes), k, from[k], i, ctx.Err())
					}
				}
			}
		}
	}
	return delays, nil
}

// publishEach publishes payloads[k] from node from[k], gap apart, and
// returns when each was sent.
func (s *Swarm) publishEach(ctx context.Context, topic func(*Node) *pubsub.Topic, from []int, payloads [][]byte, gap time.Duration) ([]time.Time, error) {
	sent := make([]time.Time, len(from))
	for k, i := range from {
		if k > 0 {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		sent[k] = time.Now()
		if err := topic(s.Nodes[i]).Publish(ctx, payloads[k]); err != nil {
			return nil, fmt.Errorf("deliver: node %d: publish: %w", i, err)
		}
	}
	return sent, nil
}

// DeliverShards is Deliver for a sharded kind (p2p.ShardedKinds):
// message k is of shard shards[k], published from node from[k] on that
// shard and on the kind's own topic, as a node publishes an offer; a
// publisher that knows no follower of the shard looks it up first
// (p2p.Discovery.FindShard). It waits until every node that follows the
// kind's own topic or that shard has it, and returns the delay of message
// k at node i as [k][i]: -1 where it did not arrive, as at a node that
// follows neither (which subscribes to neither topic).
func (s *Swarm) DeliverShards(ctx context.Context, kind string, from []int, shards []string, gap time.Duration) ([][]time.Duration, error) {
	follows := func(nd *Node, sh string) bool { return len(nd.Shards) == 0 || slices.Contains(nd.Shards, sh) }
	stamp := time.Now().UnixNano()
	index := map[string]int{}
	payloads := make([][]byte, len(from))
	want := 0
	for k, i := range from {
		payloads[k] = fmt.Appendf(nil, "deliver %d of shard %s from node %d at %d", k, shards[k], i, stamp)
		if pad := s.DeliverBytes - len(payloads[k]); pad > 0 {
			payloads[k] = append(payloads[k], make([]byte, pad)...)
		}
		index[string(payloads[k])] = k
		for _, nd := range s.Nodes {
			if follows(nd, shards[k]) {
				want++
			}
		}
	}
	arrivals := make(chan arrival, want+len(from)*len(s.Nodes))
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, nd := range s.Nodes {
		topics := []*pubsub.Topic{nd.Gossip.Topic(kind)}
		if len(nd.Shards) > 0 {
			topics = topics[:0]
			for _, sh := range nd.Shards {
				topics = append(topics, nd.Gossip.ShardTopic(kind, sh))
			}
		}
		for _, t := range topics {
			sub, err := t.Subscribe()
			if err != nil {
				return nil, fmt.Errorf("deliver: node %d: subscribe %s: %w", i, t, err)
			}
			collect(rctx, &wg, sub, index, i, arrivals)
		}
	}
	sent := make([]time.Time, len(from))
	for k, i := range from {
		if k > 0 {
			select {
			case <-time.After(gap):
			case <-rctx.Done():
				return nil, rctx.Err()
			}
		}
		nd := s.Nodes[i]
		if !slices.Contains(nd.Shards, shards[k]) { // it publishes on the shard to the followers it knows
			rc, rcancel := context.WithTimeout(rctx, 5*time.Second)
			p2p.ReachShard(rc, nd.Gossip, nd.Discovery, kind, shards[k]) // none found: only the kind's own topic carries it, and a follower misses it
			rcancel()
		}
		sent[k] = time.Now()
		if err := nd.Gossip.PublishOnShards(rctx, kind, shards[k:k+1], payloads[k]); err != nil {
			return nil, fmt.Errorf("deliver: node %d: publish on shard %s: %w", i, shards[k], err)
		}
		if err := nd.Gossip.Topic(kind).Publish(rctx, payloads[k]); err != nil {
			return nil, fmt.Errorf("deliver: node %d: publish: %w", i, err)
		}
	}
	delays := make([][]time.Duration, len(from))
	for k := range delays {
		delays[k] = make([]time.Duration, len(s.Nodes))
		for i := range delays[k] {
			delays[k][i] = -1
		}
	}
	seen := map[[2]int]bool{}
	for want > 0 {
		select {
		case a := <-arrivals:
			if seen[[2]int{a.msg, a.node}] {
				continue // a node that follows several of the message's topics
			}
			seen[[2]int{a.msg, a.node}] = true
			d := a.at.Sub(sent[a.msg])
			if from[a.msg] == a.node {
				d = 0
			}
			delays[a.msg][a.node] = d
			want--
		case <-ctx.Done():
			for k := range delays {
				for i, d := range delays[k] {
					if d < 0 && follows(s.Nodes[i], shards[k]) {
						return delays, fmt.Errorf("deliver: %d deliveries missing (first: message %d of shard %s from node %d at node %d, which follows %v): %w",
							want, k, shards[k], from[k], i, s.Nodes[i].Shards, ctx.Err())
					}
				}
			}
			return delays, fmt.Errorf("deliver: %d deliveries missing: %w", want, ctx.Err())
		}
	}
	return delays, nil
}

// arrival is message msg's arrival at node node.
type arrival struct {
	msg, node int
	at        time.Time
}

// collect reads sub, node i's, until ctx ends, and sends out each
// message of index (by payload) as an arrival now.
func collect(ctx context.Context, wg *sync.WaitGroup, sub *pubsub.Subscription, index map[string]int, i int, out chan<- arrival) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sub.Cancel()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if k, ok := index[string(msg.Data)]; ok {
				out <- arrival{k, i, time.Now()}
			}
		}
	}()
}
