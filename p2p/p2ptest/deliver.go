package p2ptest

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Deliver publishes one message on topic kind from each node in from, one
// after another, gap apart, and waits until every node has received every
// message. It returns each (message, receiving node) pair's delay from
// publication, the publisher's own copy excluded. When ctx ends first, the
// error says how many deliveries are missing and names the first.
func (s *Swarm) Deliver(ctx context.Context, kind string, from []int, gap time.Duration) ([]time.Duration, error) {
	each, err := s.DeliverEach(ctx, kind, from, gap)
	var delays []time.Duration
	for k := range each {
		for i, d := range each[k] {
			if i != from[k] && d >= 0 {
				delays = append(delays, d)
			}
		}
	}
	return delays, err
}

// DeliverEach is Deliver that says which delay is whose: the delay of
// message k at node i is [k][i], -1 where it did not arrive, 0 at its
// publisher.
func (s *Swarm) DeliverEach(ctx context.Context, kind string, from []int, gap time.Duration) ([][]time.Duration, error) {
	type arrival struct {
		msg, node int
		at        time.Time
	}
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
		sub, err := nd.Gossip.Topic(kind).Subscribe()
		if err != nil {
			return nil, fmt.Errorf("deliver: node %d: subscribe %s: %w", i, kind, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Cancel()
			for {
				msg, err := sub.Next(rctx)
				if err != nil {
					return
				}
				if k, ok := index[string(msg.Data)]; ok {
					arrivals <- arrival{k, i, time.Now()}
				}
			}
		}()
	}
	sent, err := s.publishEach(rctx, kind, from, payloads, gap)
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
func (s *Swarm) publishEach(ctx context.Context, kind string, from []int, payloads [][]byte, gap time.Duration) ([]time.Time, error) {
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
		if err := s.Nodes[i].Gossip.Topic(kind).Publish(ctx, payloads[k]); err != nil {
			return nil, fmt.Errorf("deliver: node %d: publish: %w", i, err)
		}
	}
	return sent, nil
}
