package node

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"google.golang.org/protobuf/proto"
)

// quoteTTL is how long a provider's quote holds.
const quoteTTL = 5 * time.Minute

// provider publishes this node's offer and answers bids with quotes. Only
// its loop goroutine touches current after start.
type provider struct {
	n       *Node
	quoting chan struct{} // bounds the quotes being sent at once
	cfg     ProviderConfig
	own     *market.Book // holds only this node's offer, for quoting
	current *pb.Offer
	seqKey  ds.Key
	source  attest.GPUSource // nil: the static provider.gpus
	selling []GPUConfig      // what the current offer sells
	// standing is the signed standing attestation the current offer names
	// by hash; challengers get it with their fresh document.
	standing atomic.Pointer[[]byte]
}

func newProvider(n *Node, source attest.GPUSource) *provider {
	return &provider{source: source, n: n, cfg: n.cfg.Provider, own: market.NewBook(), seqKey: ds.NewKey("/provider/seq/" + ProviderOfferID), quoting: make(chan struct{}, maxQuoting)}
}

// nextSeq returns a sequence number above every one this node has used,
// persisted first, so a restarted provider is never ignored as stale: the
// current time in milliseconds, or one above the last if the clock went back.
func (p *provider) nextSeq(ctx context.Context, now time.Time) (uint64, error) {
	seq := uint64(now.UnixMilli())
	last, err := p.n.store.Get(ctx, p.seqKey)
	switch {
	case errors.Is(err, ds.ErrNotFound):
	case err != nil:
		return 0, err
	case len(last) == 8 && binary.BigEndian.Uint64(last) >= seq:
		seq = binary.BigEndian.Uint64(last) + 1
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], seq)
	return seq, p.n.store.Put(ctx, p.seqKey, buf[:])
}

// publish signs and gossips o, an offer or a withdrawal, and keeps it in
// the provider's own book, which quotes are made from. With flush it waits
// until o was written to a peer: the node is about to close.
func (p *provider) publish(ctx context.Context, o *pb.Offer, flush bool) error {
	env, err := market.Sign(p.n.key, o)
	if err != nil {
		return err
	}
	if flush {
		err = p.n.gossip.PublishFlushed(ctx, p2p.TopicOffers, env)
	} else {
		err = p.n.Publish(ctx, p2p.TopicOffers, env)
	}
	if err != nil {
		return fmt.Errorf("publish offer: %w", err)
	}
	p.own.PutOffer(o, time.Now())
	return nil
}

// withdrawLinger is how long a stopping provider keeps its connections
// open after its withdrawal was written, so peers read it before the close.
const withdrawLinger = 250 * time.Millisecond

// firstPeerWait bounds how long a provider waits for a peer on the offers
// topic before its first publication.
const firstPeerWait = 10 * time.Second

// run publishes the offer once the offers topic has a mesh (or after
// firstPeerWait), again after three quarters of its TTL, and withdraws it
// when ctx ends. With a GPU source it reads the GPUs every watch_interval
// and republishes at once when what it can sell changes, or withdraws the
// offer while nothing is sellable. Peers that arrive later get it by sync.
func (p *provider) run(ctx context.Context) {
	defer p.n.wg.Done()
	p.n.awaitMesh(ctx, p2p.TopicOffers, firstPeerWait)
	var due time.Time // when the offer must be re-published
	for {
		now := time.Now()
		gpus, inv, err := p.sellableNow(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				p.n.log.Warn("GPUs not read", "err", err)
			}
		case len(gpus) == 0:
			if p.current != nil && !p.current.Withdrawn {
				p.withdrawNow(ctx)
				p.n.log.Info("offer withdrawn: no GPU sellable now")
			}
		case !slices.EqualFunc(gpus, p.selling, func(a, b GPUConfig) bool { return a == b }) || now.After(due) || p.current.Withdrawn:
			if err = p.publishOffer(ctx, gpus, inv, now); err == nil {
				due = now.Add(p.cfg.OfferTTL.Std() * 3 / 4)
			}
		}
		wait := time.Until(due)
		if p.source != nil {
			wait = min(wait, p.cfg.WatchInterval.Std())
		}
		if err != nil && ctx.Err() == nil {
			p.n.log.Warn("offer not published; retrying in 10s", "err", err)
			wait = 10 * time.Second
		}
		select {
		case <-ctx.Done():
			p.withdraw()
			return
		case <-time.After(wait):
		}
	}
}

// sellableNow is what the provider can sell now: the static list, or what
// the GPU source reads, with the inventory it read (nil for the static
// list).
func (p *provider) sellableNow(ctx context.Context) ([]GPUConfig, *attest.Inventory, error) {
	if p.source == nil {
		return p.cfg.GPUs, nil, nil
	}
	return p.readSellable(ctx)
}

// publishOffer signs and gossips an offer for gpus. With an inventory the
// offer carries the hash of its standing attestation (standingFor).
func (p *provider) publishOffer(ctx context.Context, gpus []GPUConfig, inv *attest.Inventory, now time.Time) error {
	o, err := p.buildOffer(ctx, gpus, inv, now)
	if err != nil {
		return err
	}
	if err := p.publish(ctx, o, false); err != nil {
		return err
	}
	p.current, p.selling = o, slices.Clone(gpus)
	p.n.log.Info("offer published", "seq", o.Header.Seq, "gpus", len(o.Gpus), "expires", time.UnixMilli(o.Header.ExpiresUnixMs).UTC())
	return nil
}

// prepare puts the offer the provider is about to publish in its own book,
// and its standing attestation in the challengers' answers, before it
// serves leases: a renter holding the offer from before a restart is not
// refused while the first publication waits for a mesh.
func (p *provider) prepare(ctx context.Context) {
	gpus, inv, err := p.sellableNow(ctx)
	if err != nil || len(gpus) == 0 {
		return
	}
	if o, err := p.buildOffer(ctx, gpus, inv, time.Now()); err == nil {
		p.own.PutOffer(o, time.Now())
	}
}

// buildOffer makes the offer for gpus under the next sequence number, with
// the standing attestation of inv when there is one.
func (p *provider) buildOffer(ctx context.Context, gpus []GPUConfig, inv *attest.Inventory, now time.Time) (*pb.Offer, error) {
	seq, err := p.nextSeq(ctx, now)
	if err != nil {
		return nil, err
	}
	cfg := p.cfg
	cfg.GPUs = gpus
	o, err := cfg.BuildOffer(p.n.host.ID(), seq, now)
	if err != nil {
		return nil, err
	}
	if inv != nil {
		env, err := p.standingFor(ctx, *inv, o.Header.Id, now)
		if err != nil {
			return nil, err
		}
		o.AttestationHash = attest.DocumentHash(env)
		p.standing.Store(&env)
	}
	return o, nil
}

// standingKey holds the provider's standing attestation across restarts.
var standingKey = ds.NewKey("/provider/standing/" + ProviderOfferID)

// standingFor returns the standing attestation of inv for offerID: the one
// stored, while it shows exactly this hardware (the same GPUs, driver and
// CUDA), or a new one, signed and stored. Kept across republishing and
// restarts, its hash stays the one in every copy of the offer that books
// still hold, so a challenger with an older copy finds it covered.
func (p *provider) standingFor(ctx context.Context, inv attest.Inventory, offerID string, now time.Time) ([]byte, error) {
	fresh := attest.NewDocument(inv, p.n.host.ID(), nil, now, []string{offerID})
	if env, err := p.n.store.Get(ctx, standingKey); err == nil {
		d, err := attest.VerifyStanding(env, p.n.host.ID(), attest.DocumentHash(env), offerID)
		if err == nil && attest.SameHardware(d, fresh) == nil && attest.SameHardware(fresh, d) == nil && d.CudaVersion == fresh.CudaVersion {
			return env, nil
		}
	}
	env, err := attest.SignDocument(p.n.key, fresh)
	if err != nil {
		return nil, err
	}
	return env, p.n.store.Put(ctx, standingKey, env)
}

// withdrawNow gossips a withdrawal of the current offer while the node runs.
func (p *provider) withdrawNow(ctx context.Context) {
	if err := p.withdrawOffer(ctx, false); err != nil {
		p.n.log.Warn("withdrawal not published", "err", err)
	}
}

// withdraw gossips a withdrawal of the current offer so books drop it now
// rather than at expiry. It runs during shutdown, with its own deadline.
func (p *provider) withdraw() {
	if p.current == nil || p.current.Withdrawn {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.withdrawOffer(ctx, true); err != nil {
		p.n.log.Debug("withdrawal not published", "err", err)
		return
	}
	// Linger: closing a TCP connection with unread data in its receive
	// buffer (peers keep sending us pings and gossip) resets it, and the
	// reset can discard the withdrawal before the peer has read it.
	select {
	case <-time.After(withdrawLinger):
	case <-ctx.Done():
	}
}

// withdrawOffer publishes a withdrawal of the current offer: its header
// at a new sequence number.
func (p *provider) withdrawOffer(ctx context.Context, flush bool) error {
	now := time.Now()
	seq, err := p.nextSeq(ctx, now)
	if err != nil {
		return err
	}
	h := proto.Clone(p.current.Header).(*pb.Header)
	h.Seq, h.CreatedUnixMs = seq, now.UnixMilli()
	w := &pb.Offer{Header: h, Withdrawn: true}
	if err := p.publish(ctx, w, flush); err != nil {
		return err
	}
	p.current, p.selling = w, nil
	return nil
}

// maxQuoting bounds the quotes a provider sends at once; bids beyond it
// go unanswered rather than queue up behind slow renters.
const maxQuoting = 16

// answerAsync answers a bid off the bids reader's goroutine, so a slow
// renter never holds up the topic.
func (p *provider) answerAsync(ctx context.Context, b *pb.Bid) {
	select {
	case p.quoting <- struct{}{}:
	default:
		p.n.log.Debug("bid not quoted: too many quotes in flight", "bid", b.Header.Id)
		return
	}
	p.n.wg.Add(1)
	go func() {
		defer p.n.wg.Done()
		defer func() { <-p.quoting }()
		p.answer(ctx, b)
	}()
}

// answer quotes a bid that this provider's own offer fits, and sends the
// quote to the bidder.
func (p *provider) answer(ctx context.Context, b *pb.Bid) {
	if market.Issuer(b) == p.n.host.ID() {
		return
	}
	now := time.Now()
	res := p.n.market.matcher.Match(p.own.Snapshot(), b, now, 1)
	if len(res.Candidates) == 0 {
		p.n.log.Debug("bid not quoted", "bid", b.Header.Id, "why", p.n.market.matcher.Explain(p.own.Snapshot(), b, now).String())
		return
	}
	c := res.Candidates[0]
	// One quote per bid: the quote's ID derives from the bid's, at a fixed
	// length whatever the bid ID's.
	sum := sha256.Sum256([]byte(b.Header.Id))
	q := &pb.Quote{
		Header: &pb.Header{Version: market.Version, Issuer: []byte(p.n.host.ID()), Id: "q-" + hex.EncodeToString(sum[:12]), Seq: b.Header.Seq,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(quoteTTL).UnixMilli()},
		BidIssuer: b.Header.Issuer, BidId: b.Header.Id, BidSeq: b.Header.Seq,
		OfferId: c.Offer.Header.Id, Tier: b.Tier, Currency: c.Offer.Currency, PriceMicros: c.PriceMicros,
		Gpus: c.GPUs, StartUnixMs: c.Start.UnixMilli(), DurationSeconds: b.DurationSeconds,
	}
	env, err := market.Sign(p.n.key, q)
	if err != nil {
		p.n.log.Warn("quote not signed", "err", err)
		return
	}
	if err := p2p.SendQuote(ctx, p.n.host, market.Issuer(b), env); err != nil {
		p.n.log.Debug("quote not delivered", "bid", b.Header.Id, "err", err)
	}
}
