package provider

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
)

// quoteTTL is how long a provider's quote holds.
const quoteTTL = 5 * time.Minute

// OnBid hands a gossiped bid, relayed by from, to the quoting loop
// without waiting. Bids wait by lane and are quoted round-robin across
// lanes: a peer's own bids are one lane, the bids it relays for others
// another. A peer relaying a flood of bids (of free keys, whose quotes go
// nowhere) fills its relay lane, not the one an honest renter's bid waits
// in, even when the flood comes through that renter. A bid that finds its
// lane full goes unanswered, so a slow renter or a burst of bids never
// holds up the bids topic.
func (p *Provider) OnBid(_ context.Context, from peer.ID, b *pb.Bid) {
	if !p.bids.push(from, b) {
		p.log.Debug("bid not quoted: its relay's queue is full", "bid", b.Header.Id, "relay", from)
		p.metrics.BidUnquoted(metrics.UnquotedQueueFull)
	}
}

// quoteLoop answers the queued bids, at most maxQuoting at once, of
// which at most maxLocating look their bidder up first.
//
// A bid costs its issuer nothing, and the quote of one this node is not
// connected to holds its slot for a DHT lookup of up to
// swarm.QuoteLocateWait; a flood of free keys' bids would hold every
// slot so, and a connected renter's bid would wait behind them past its
// renter's patience. So a bid whose bidder is connected is quoted in its
// lane's turn whatever the lookups hold; a bid that needs a lookup while
// none is free keeps its lane's place at the front of the turn, and gets
// the next lookup that frees ahead of the lanes behind it: it is delayed,
// never dropped, so an honest renter that is not connected is quoted in
// turn through a flood of lookups too.
func (p *Provider) quoteLoop(ctx context.Context) {
	defer p.wg.Done()
	var sending sync.WaitGroup
	defer sending.Wait()
	for {
		canLocate := len(p.locating) < cap(p.locating) // only this loop takes a lookup slot
		lookup := false
		b, ok := p.bids.pop(func(b *pb.Bid) bool {
			lookup = !p.net.Connected(market.Issuer(b))
			return canLocate || !lookup
		})
		if !ok {
			select {
			case <-p.bids.ready:
			case <-p.located:
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case p.quoting <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if lookup {
			p.locating <- struct{}{} // free: canLocate, and no one else takes one
		}
		sending.Add(1)
		go func() {
			defer sending.Done()
			defer func() {
				<-p.quoting
				if lookup {
					<-p.locating
					select {
					case p.located <- struct{}{}:
					default:
					}
				}
			}()
			p.answer(ctx, b)
		}()
	}
}

// Bounds of the bid queue.
const (
	bidsPerRelay = 8   // bids one lane may have waiting
	maxRelays    = 256 // lanes with bids waiting; a new one beyond is refused
)

// bidLane is where a bid waits: the peer that relayed it, and whether
// that peer issued it.
type bidLane struct {
	relay peer.ID
	own   bool
}

// bidQueue holds the bids waiting for a quote, a FIFO per lane, and hands
// them out one lane at a time in turn.
type bidQueue struct {
	mu    sync.Mutex // guards by and turn: no I/O under it
	by    map[bidLane][]*pb.Bid
	turn  []bidLane     // lanes with bids waiting, next first
	ready chan struct{} // signalled (1-buffered) when a bid is added
}

func newBidQueue() *bidQueue {
	return &bidQueue{by: map[bidLane][]*pb.Bid{}, ready: make(chan struct{}, 1)}
}

// push queues b, relayed by from, behind the other bids of its lane;
// false if that lane, or the turn of lanes, is full.
func (q *bidQueue) push(from peer.ID, b *pb.Bid) bool {
	lane := bidLane{relay: from, own: market.Issuer(b) == from}
	q.mu.Lock()
	defer q.mu.Unlock()
	waiting, known := q.by[lane]
	switch {
	case len(waiting) >= bidsPerRelay, !known && len(q.turn) >= maxRelays:
		return false
	case !known:
		q.turn = append(q.turn, lane)
	}
	q.by[lane] = append(waiting, b)
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest bid of the first lane in turn whose oldest bid
// ready accepts, and sends that lane to the back of the turn; the lanes it
// passed over keep their places ahead. False when no bid waits that ready
// accepts. ready is called under the queue's lock: it must do no I/O.
func (q *bidQueue) pop(ready func(*pb.Bid) bool) (*pb.Bid, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, lane := range q.turn {
		waiting := q.by[lane]
		b := waiting[0]
		if !ready(b) {
			continue
		}
		if i == 0 {
			q.turn = q.turn[1:]
		} else {
			q.turn = append(q.turn[:i], q.turn[i+1:]...)
		}
		if len(waiting) == 1 {
			delete(q.by, lane)
		} else {
			q.by[lane] = waiting[1:]
			q.turn = append(q.turn, lane)
		}
		return b, true
	}
	return nil, false
}

// answer quotes a bid that this provider's own offer fits, and sends the
// quote to the bidder.
func (p *Provider) answer(ctx context.Context, b *pb.Bid) {
	if market.Issuer(b) == p.id {
		return
	}
	now := p.clock.Now()
	snap := p.own.Snapshot()
	res := p.matcher.Match(snap, b, now, 1)
	if len(res.Candidates) == 0 {
		if p.log.Enabled(ctx, slog.LevelDebug) { // a bid is a stranger's: explain only to who reads it
			p.log.Debug("bid not quoted", "bid", b.Header.Id, "why", p.matcher.Explain(snap, b, now).String())
		}
		p.metrics.BidUnquoted(metrics.UnquotedNoFit)
		return
	}
	env, err := market.Sign(p.key, market.NewQuote(p.id, b, res.Candidates[0], now, quoteTTL))
	if err != nil {
		p.log.Warn("quote not signed", "err", err)
		p.metrics.BidUnquoted(metrics.UnquotedUnsigned)
		return
	}
	if err := p.net.SendQuote(ctx, market.Issuer(b), env); err != nil {
		p.log.Debug("quote not delivered", "bid", b.Header.Id, "err", err)
		p.metrics.BidUnquoted(metrics.UnquotedUndelivered)
		return
	}
	p.metrics.QuoteSent()
}

// errNothingToAttest answers a challenge to a provider without a GPU
// source.
var errNothingToAttest = errors.New("this node sells no GPUs it can attest")

// AnswerChallenge answers from's challenge: this provider's GPUs as its
// source reads them now, over the nonce and naming from, with each GPU's
// confidential-computing evidence, where the source gives it, over the
// nonce bound to this provider and the challenge, backing its current
// offer; and the standing document that offer names by hash.
func (p *Provider) AnswerChallenge(ctx context.Context, from peer.ID, nonce []byte) (fresh, standing []byte, err error) {
	defer func() { p.metrics.AttestationServed(err) }()
	if p.source == nil {
		return nil, nil, errNothingToAttest
	}
	inv, err := p.source.Inventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	ch := attest.Challenge{Swarm: p.swarm, Challenger: from, Nonce: nonce}
	d := attest.NewDocument(inv, p.id, ch, p.clock.Now(), []string{offer.ProviderOfferID})
	if cc, ok := p.source.(attest.CCSource); ok {
		ev, err := cc.CCEvidence(ctx, ch.CCNonce(p.id))
		if err != nil {
			return nil, nil, err
		}
		attest.AttachCC(d, ev)
	}
	if fresh, err = attest.SignDocument(p.key, d); err != nil {
		return nil, nil, err
	}
	if s := p.standing.Load(); s != nil {
		standing = *s
	}
	return fresh, standing, nil
}

// standingKey holds the provider's standing attestation across restarts.
var standingKey = ds.NewKey("/provider/standing/" + offer.ProviderOfferID)

// standingFor returns the standing attestation of inv for offerID: the one
// stored, while it shows exactly this hardware (the same GPUs, driver and
// CUDA), or a new one, signed and stored. Kept across republishing and
// restarts, its hash stays the one in every copy of the offer that books
// still hold, so a challenger with an older copy finds it covered.
func (p *Provider) standingFor(ctx context.Context, inv attest.Inventory, offerID string, now time.Time) ([]byte, error) {
	fresh := attest.NewDocument(inv, p.id, attest.Challenge{Swarm: p.swarm}, now, []string{offerID})
	if env, err := p.store.Get(ctx, standingKey); err == nil {
		d, err := attest.VerifyStanding(env, p.id, p.swarm, attest.DocumentHash(env), offerID)
		if err == nil && attest.SameHardware(d, fresh) == nil && attest.SameHardware(fresh, d) == nil && d.CudaVersion == fresh.CudaVersion {
			return env, nil
		}
	}
	env, err := attest.SignDocument(p.key, fresh)
	if err != nil {
		return nil, err
	}
	return env, p.store.Put(ctx, standingKey, env)
}
