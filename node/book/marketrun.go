package book

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Maintenance intervals of the market side.
const (
	// expireEvery is how often expired offers and bids leave the book.
	expireEvery = 30 * time.Second
	// flushEvery is how often accepted sequence numbers are written: a
	// node killed in between forgets that interval's.
	flushEvery = time.Second
)

// topicBuffer is how many accepted messages a topic's reader may lag
// behind. pubsub drops what a full subscription cannot take (at its
// default of 32, a burst of 40 offers published at once lost two from the
// node's own book, already marked seen and relayed), so it holds a
// relay's whole burst (p2p.PeerRates) and more.
const topicBuffer = 4096

// Start installs the validators, serves book sync and quotes, and starts
// the topic readers, book sync and maintenance. ctx ends them; close
// waits for them.
func (m *Market) Start(ctx context.Context, sv p2p.Server, g *p2p.Gossip, gone <-chan peer.ID) error {
	if err := m.Validator.Install(g); err != nil {
		return err
	}
	p2p.ServeBookSync(sv, m.EnvelopesNow)
	p2p.ServeEvidence(sv, m.evidenceHeld)
	p2p.ServeQuotes(sv, m.receiveQuote)
	joins := make(chan peer.ID)
	start := func(kind string, sub *pubsub.Subscription, events *pubsub.TopicEventHandler) {
		m.wg.Add(1)
		go m.readTopic(ctx, kind, sub)
		if events != nil {
			feedJoins(ctx, events, joins, &m.wg)
		}
	}
	for _, kind := range p2p.TopicKinds {
		if !m.shards.all && slices.Contains(p2p.ShardedKinds, kind) {
			continue // its shards instead
		}
		sub, err := g.Topic(kind).Subscribe(pubsub.WithBufferSize(topicBuffer))
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", kind, err)
		}
		var events *pubsub.TopicEventHandler
		if kind == p2p.TopicOffers {
			if events, err = g.Topic(kind).EventHandler(); err != nil {
				sub.Cancel()
				return fmt.Errorf("offers topic events: %w", err)
			}
		}
		start(kind, sub, events)
	}
	if !m.shards.all {
		m.shards.mu.Lock()
		m.shards.g, m.shards.start = g, start
		var err error
		for _, sh := range m.shards.followed {
			if err = m.subscribeShard(sh); err != nil {
				break
			}
		}
		m.shards.mu.Unlock()
		if err != nil {
			return err
		}
	}
	m.wg.Add(2)
	go m.syncBooks(ctx, joins, gone)
	go m.maintain(ctx)
	return nil
}

// readTopic drains one subscription. Messages reached it only after the
// topic's validator accepted them, which left the verified message in
// ValidatorData.
func (m *Market) readTopic(ctx context.Context, kind string, sub *pubsub.Subscription) {
	defer m.wg.Done()
	defer sub.Cancel()
	for {
		msg, err := sub.Next(ctx)
		if err != nil {
			return
		}
		if m.Received != nil {
			m.Received(kind)
		}
		switch v := msg.ValidatorData.(type) {
		case *pb.Offer:
			m.offer(ctx, v, msg.Data)
		case []peer.ID:
			m.RecordOffenders(ctx, v, msg.Data)
		case *pb.Bid:
			m.bid(ctx, v)
			if m.OnBid != nil {
				m.OnBid(ctx, msg.ReceivedFrom, v)
			}
		}
	}
}

// maintain expires the book and prunes and flushes sequence numbers.
func (m *Market) maintain(ctx context.Context) {
	defer m.wg.Done()
	expire := m.clock.NewTicker(expireEvery)
	defer expire.Stop()
	flush := time.NewTicker(flushEvery) // batches disk writes: real time
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-expire.C():
			if m.expire(ctx, now) == nil {
				m.seqs.Prune(now.UnixMilli())
			}
		case <-flush.C:
			if err := m.seqs.Flush(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("sequence numbers not written; retrying", "err", err)
			}
		}
	}
}

// PlaceBid registers b for the quotes that come back; TakeQuotes returns
// them, cheapest first, and forgets the bid.
func (m *Market) PlaceBid(ctx context.Context, b *pb.Bid) error {
	return m.Do(ctx, func(st *State) { st.pending[b.Header.Id] = &pendingBid{bid: b} })
}

// TakeQuotes returns the quotes that came back for the bid id, and
// forgets it.
func (m *Market) TakeQuotes(ctx context.Context, id string) ([]*pb.Quote, error) {
	var quotes []*pb.Quote
	err := m.Do(ctx, func(st *State) {
		if p := st.pending[id]; p != nil {
			quotes = p.quotes
		}
		delete(st.pending, id)
	})
	slices.SortFunc(quotes, func(a, b *pb.Quote) int { return cmp.Compare(a.PriceMicros, b.PriceMicros) })
	return quotes, err
}

// receiveQuote keeps a verified quote that answers one of our open bids:
// one per provider, the latest.
func (m *Market) receiveQuote(from peer.ID, env []byte) {
	q, err := market.Open[*pb.Quote](env)
	if err == nil {
		err = m.limits.ValidateQuote(q, m.clock.Now())
	}
	if err != nil || market.Issuer(q) != from {
		m.log.Debug("quote refused", "from", from, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.Do(ctx, func(st *State) {
		pend, ok := st.pending[q.BidId]
		if !ok || market.QuoteAnswers(q, pend.bid) != nil {
			return
		}
		for i, held := range pend.quotes {
			if market.Issuer(held) == from {
				pend.quotes[i] = q
				return
			}
		}
		pend.quotes = append(pend.quotes, q)
	})
}
