package provider

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Provider publishes this node's offer, answers bids with quotes and
// challenges with attestations. Its run goroutine alone touches current
// and selling; the own book (this node's offer only) and the standing
// attestation are read by the quotes, the challenges and the lease owner.
type Provider struct {
	id    peer.ID
	swarm string
	key   crypto.PrivKey
	// settlements are the ways to pay the offers list; fixed.
	settlements []*pb.Settlement
	datasets    func() []string
	follow      func(shards ...string) error          // nil: the node hears every shard
	cfgNow      atomic.Pointer[config.ProviderConfig] // swapped by reconfigure
	wake        chan struct{}                         // a reconfigure for the loop
	source      attest.GPUSource                      // nil: the static provider.gpus
	store       ds.Datastore
	net         Publisher
	clock       clock.Clock
	log         *slog.Logger
	own         *market.Book // holds only this node's offer, for quoting and admission
	matcher     *market.Matcher
	bids        *bidQueue     // to quote, by the peer that relayed each
	quoting     chan struct{} // bounds the quotes being sent at once
	// locating bounds, within quoting, the quotes that look their bidder
	// up first; located signals (1-buffered) that one of those ended.
	locating, located chan struct{}
	wg                sync.WaitGroup
	// standing is the signed standing attestation the current offer names
	// by hash; challengers get it with their fresh document.
	standing atomic.Pointer[[]byte]

	current   *pb.Offer
	idleWhy   string             // why the provider sells nothing now; "" while it sells (prepare's, then run's)
	selling   []config.GPUConfig // what the current offer sells
	coord     func() *coordinate.Coordinate
	relayOnly func() bool
	// book is the node's market, which a market pricing policy follows;
	// nil: none.
	book func() *market.Snapshot
	// pricesFrom says whose offers a market pricing policy follows; nil:
	// no one's.
	pricesFrom func(peer.ID) bool
	// verifyMarket challenges comparable issuers pricesFrom cannot count
	// yet, before a market re-price; nil: none.
	verifyMarket func(ctx context.Context, o *pb.Offer)
	// pricing is how the offer last built was priced.
	pricing atomic.Pointer[offer.Pricing]
	metrics *metrics.Metrics // may be nil
}

// Deps are what a Provider is built from.
type Deps struct {
	ID     peer.ID
	Swarm  string // the swarm's tag, named in every offer
	Key    crypto.PrivKey
	Cfg    config.ProviderConfig
	Source attest.GPUSource
	Store  ds.Datastore
	Net    Publisher
	Clock  clock.Clock
	Log    *slog.Logger
	// Coord is this node's network coordinate, carried in its offers; nil
	// for none.
	Coord func() *coordinate.Coordinate
	// RelayOnly reports whether peers reach this node only through relays,
	// which its offers say; nil: never.
	RelayOnly func() bool
	// Book is the node's market; nil: none.
	Book func() *market.Snapshot
	// PricesFrom says whose offers in Book count toward a market price;
	// nil: no one's.
	PricesFrom func(peer.ID) bool
	// VerifyMarket challenges comparable issuers before a market re-price
	// (PriceVerifier.Verify); nil: none.
	VerifyMarket func(ctx context.Context, o *pb.Offer)
	// Metrics counts offers, quotes and attestations; nil: none.
	Metrics *metrics.Metrics
	// Settlements are the ways to pay the offers list (nil: the ledger).
	Settlements []*pb.Settlement
	// Datasets are the root CIDs of the datasets this node keeps, the
	// most recently used first, for its offers to list; nil: none.
	Datasets func() []string
	// Follow has the node hear the shards its offers are gossiped on
	// (the bids for its GPUs' families); nil: nothing to do.
	Follow func(shards ...string) error
}

// maxQuoting bounds the quotes a provider sends at once; bids beyond it
// wait in their lanes, and go unanswered when their lane is full, rather
// than queue up behind slow renters. maxLocating bounds those of them
// that look their bidder up first, so that the rest are always free for
// bidders this node is connected to.
const (
	maxQuoting  = 16
	maxLocating = maxQuoting / 2
)

// New is a provider of d, which publishes nothing until Start.
func New(d Deps) *Provider {
	p := &Provider{
		id: d.ID, swarm: d.Swarm, key: d.Key, wake: make(chan struct{}, 1), source: d.Source, store: d.Store, net: d.Net, clock: d.Clock, log: d.Log,
		coord: d.Coord, relayOnly: d.RelayOnly, book: d.Book, pricesFrom: d.PricesFrom, verifyMarket: d.VerifyMarket, own: market.NewBook(), matcher: market.NewMatcher(market.DefaultMatchConfig(), nil, nil),
		bids: newBidQueue(), quoting: make(chan struct{}, maxQuoting),
		locating: make(chan struct{}, maxLocating), located: make(chan struct{}, 1), metrics: d.Metrics, settlements: d.Settlements, datasets: d.Datasets,
		follow: d.Follow,
	}
	p.cfgNow.Store(&d.Cfg)
	return p
}

// Config is the provider's configuration now.
func (p *Provider) Config() config.ProviderConfig { return *p.cfgNow.Load() }

// Source is the provider's GPU source; nil for the static provider.gpus.
func (p *Provider) Source() attest.GPUSource { return p.source }

// Standing is the signed standing attestation the current offer names by
// hash, or nil before the first.
func (p *Provider) Standing() []byte {
	if s := p.standing.Load(); s != nil {
		return *s
	}
	return nil
}

// Pricing is how the offer last built was priced, or nil before the
// first.
func (p *Provider) Pricing() *offer.Pricing { return p.pricing.Load() }

// Reconfigure replaces the terms the next offer is built on (price,
// windows, policy) and has the loop publish it now.
func (p *Provider) Reconfigure(c config.ProviderConfig) {
	p.cfgNow.Store(&c)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Start puts the offer the provider is about to publish in its own book
// and serves challenges, then starts publishing and quoting. ctx ends
// them: the offer is withdrawn.
func (p *Provider) Start(ctx context.Context, sv p2p.Server) {
	p.markSince(ctx, p.clock.Now())
	p.prepare(ctx)
	if p.source != nil {
		p2p.ServeAttestation(sv, p.AnswerChallenge)
	}
	p.wg.Add(2)
	go p.run(ctx)
	go p.quoteLoop(ctx)
}

// Close waits for what Start started (its ctx must have ended).
func (p *Provider) Close() { p.wg.Wait() }

// OwnOffer is this provider's offer as it stands, if any.
func (p *Provider) OwnOffer() (*pb.Offer, bool) {
	return p.own.Snapshot().Offer(p.id, offer.ProviderOfferID)
}

// seqKey holds the last sequence number the provider used.
var seqKey = ds.NewKey("/provider/seq/" + offer.ProviderOfferID)

// nextSeq returns a sequence number above every one this node has used,
// persisted first, so a restarted provider is never ignored as stale: the
// current time in milliseconds, or one above the last if the clock went back.
func (p *Provider) nextSeq(ctx context.Context, now time.Time) (uint64, error) {
	seq := uint64(now.UnixMilli())
	last, err := p.store.Get(ctx, seqKey)
	switch {
	case errors.Is(err, ds.ErrNotFound):
	case err != nil:
		return 0, err
	case len(last) == 8 && binary.BigEndian.Uint64(last) >= seq:
		seq = binary.BigEndian.Uint64(last) + 1
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], seq)
	return seq, p.store.Put(ctx, seqKey, buf[:])
}

// publish signs and gossips o, an offer or a withdrawal, and keeps it in
// the provider's own book, which quotes are made from. With flush it waits
// until o was written to a peer: the node is about to close.
func (p *Provider) publish(ctx context.Context, o *pb.Offer, flush bool) error {
	env, err := market.Sign(p.key, o)
	if err != nil {
		return err
	}
	if flush {
		err = p.net.PublishFlushed(ctx, p2p.TopicOffers, env)
	} else {
		err = p.net.Publish(ctx, p2p.TopicOffers, env)
	}
	if err != nil {
		return fmt.Errorf("publish offer: %w", err)
	}
	p.metrics.OfferPublished(o.Withdrawn)
	p.own.PutOffer(o, p.clock.Now())
	if p.follow != nil && !o.Withdrawn {
		if err := p.follow(p2p.OfferShards(o)...); err != nil {
			p.log.Warn("the bids for this node's GPUs are not heard", "err", err)
		}
	}
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
func (p *Provider) run(ctx context.Context) {
	defer p.wg.Done()
	p.net.AwaitMesh(ctx, p2p.TopicOffers, firstPeerWait)
	var due time.Time                // when the offer must be re-published
	var built *config.ProviderConfig // the configuration the current offer came from
	for {
		now := p.clock.Now()
		cfg := p.cfgNow.Load()
		var err error // the publication's
		gpus, inv, heldBack, readErr := p.sellableNow(ctx)
		switch {
		case readErr != nil:
			if ctx.Err() == nil {
				p.sellsNothing(nothingSellable(readErr, heldBack))
			}
		case len(gpus) == 0:
			if p.current != nil && !p.current.Withdrawn {
				p.withdrawNow(ctx)
				p.log.Info("offer withdrawn: no GPU sellable now")
			}
			p.sellsNothing(nothingSellable(nil, heldBack))
		case !slices.Equal(gpus, p.selling) || now.After(due) || p.current.Withdrawn || cfg != built || p.coordMoved() || p.reachMoved() || p.datasetsMoved():
			if err = p.publishOffer(ctx, gpus, inv, now); err == nil {
				due, built = now.Add(cfg.OfferTTL.Std()*3/4), cfg
				p.sellsNothing("")
			}
		}
		wait := min(due.Sub(now), coordCheckEvery)
		if p.source != nil {
			wait = min(wait, cfg.WatchInterval.Std())
		}
		if err != nil && ctx.Err() == nil {
			p.log.Warn("offer not published; retrying in 10s", "err", err)
			wait = 10 * time.Second
		}
		select {
		case <-ctx.Done():
			p.withdraw()
			return
		case <-p.clock.After(wait):
		case <-p.wake:
		}
	}
}

// datasetsMoved reports whether the datasets this node keeps are not
// those its offer lists: a renter whose job reads them ranks it by them.
func (p *Provider) datasetsMoved() bool {
	if p.datasets == nil || p.current == nil {
		return false
	}
	now := p.datasets()
	now, listed := slices.Clone(now[:min(len(now), market.MaxOfferDatasets)]), slices.Clone(p.current.Datasets)
	slices.Sort(now) // a set: using one reorders, and moves nothing
	slices.Sort(listed)
	return !slices.Equal(now, listed)
}

// sellableNow is what the provider can sell now: the static list, or what
// the GPU source reads, with the inventory it read (nil for the static
// list) and why each GPU read is held back.
func (p *Provider) sellableNow(ctx context.Context) ([]config.GPUConfig, *attest.Inventory, []string, error) {
	if p.source == nil {
		return p.Config().GPUs, nil, nil, nil
	}
	return p.readSellable(ctx)
}

// nothingSellable says why a read of the GPUs left nothing to sell.
func nothingSellable(err error, heldBack []string) string {
	if err != nil {
		return err.Error()
	}
	return "no GPU sellable now: " + cmp.Or(strings.Join(heldBack, "; "), "provider.share names none of the GPUs read")
}

// sellsNothing logs, loudly and once for each new reason, that this
// provider sells nothing and why (a missing driver, every GPU busy or
// hot), and once that it sells again (why empty). A provider that sells
// nothing looks idle from outside; its log is where its owner looks.
func (p *Provider) sellsNothing(why string) {
	switch {
	case why == p.idleWhy:
	case why != "":
		p.log.Warn("this provider sells nothing", "why", why)
	case p.idleWhy != "":
		p.log.Info("this provider sells again", "was", p.idleWhy)
	}
	p.idleWhy = why
}

// publishOffer signs and gossips an offer for gpus. With an inventory the
// offer carries the hash of its standing attestation (standingFor).
func (p *Provider) publishOffer(ctx context.Context, gpus []config.GPUConfig, inv *attest.Inventory, now time.Time) error {
	o, err := p.buildOffer(ctx, gpus, inv, now)
	if err != nil {
		return err
	}
	if err := p.publish(ctx, o, false); err != nil {
		return err
	}
	p.current, p.selling = o, slices.Clone(gpus)
	p.log.Info("offer published", "seq", o.Header.Seq, "gpus", len(o.Gpus), "price", market.FormatPrice(o.PriceMicros), "expires", time.UnixMilli(o.Header.ExpiresUnixMs).UTC())
	return nil
}

// prepare puts the offer the provider is about to publish in its own book,
// and its standing attestation in the challengers' answers, before it
// serves leases: a renter holding the offer from before a restart is not
// refused while the first publication waits for a mesh.
func (p *Provider) prepare(ctx context.Context) {
	gpus, inv, heldBack, err := p.sellableNow(ctx)
	if err != nil || len(gpus) == 0 {
		p.sellsNothing(nothingSellable(err, heldBack))
		return
	}
	now := p.clock.Now()
	if o, err := p.buildOffer(ctx, gpus, inv, now); err == nil {
		p.own.PutOffer(o, now)
	}
}

// buildOffer makes the offer for gpus under the next sequence number, with
// the standing attestation of inv when there is one.
func (p *Provider) buildOffer(ctx context.Context, gpus []config.GPUConfig, inv *attest.Inventory, now time.Time) (*pb.Offer, error) {
	seq, err := p.nextSeq(ctx, now)
	if err != nil {
		return nil, err
	}
	cfg := p.Config()
	cfg.GPUs = gpus
	o, err := offer.Build(cfg, p.id, seq, now)
	if err != nil {
		return nil, err
	}
	if p.verifyMarket != nil && cfg.Pricing.Policy == config.PolicyMarket {
		p.verifyMarket(ctx, o)
	}
	var snap *market.Snapshot
	if p.book != nil {
		snap = p.book()
	}
	pr := offer.Price(o, cfg, snap, p.current, p.id, now, p.pricesFrom)
	p.pricing.Store(&pr)
	o.Header.Swarm = p.swarm
	o.Settlements = p.settlements
	o.Coordinate = p.coordNow()
	o.RelayOnly = p.relayOnly != nil && p.relayOnly()
	if p.datasets != nil {
		o.Datasets = p.datasets()
		o.Datasets = o.Datasets[:min(len(o.Datasets), market.MaxOfferDatasets)]
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

// coordCheckEvery is how often a provider looks whether its coordinate
// moved enough since its offer to publish it again.
const coordCheckEvery = 10 * time.Second

// coordMoveAtLeast is how far a provider's coordinate moves before its
// offer is published again ahead of time: renters estimate their RTT to
// it from the offer's.
const coordMoveAtLeast = 10 * time.Millisecond

// coordErrorFloor is the error below which a falling error alone no
// longer republishes an offer.
const coordErrorFloor = 0.1

// coordNow is the provider's coordinate for an offer; nil with none, or
// with one of a shape the market would refuse.
func (p *Provider) coordNow() *pb.NetworkCoordinate {
	if p.coord == nil {
		return nil
	}
	c := p2p.CoordToProto(p.coord())
	if market.CheckCoordinate(c) != nil {
		return nil
	}
	return c
}

// coordMoved reports whether the offer's coordinate should be replaced:
// it was not settled (renters estimate nothing from it) and the node's is
// now, the node's error fell to half the offer's (above coordErrorFloor:
// a few republishes while the coordinate converges), or the node's moved
// coordMoveAtLeast from it.
func (p *Provider) coordMoved() bool {
	if p.current == nil || p.current.Withdrawn || p.coord == nil {
		return false
	}
	now, was := p.coord(), p.current.GetCoordinate()
	switch {
	case now.Error > p2p.EstimateMaxError:
		return false
	case was == nil || was.Error > p2p.EstimateMaxError:
		return true
	case was.Error > coordErrorFloor && now.Error < was.Error/2:
		return true // half as uncertain: estimates from it, a pool's pair RTTs, are sharper
	}
	old := p2p.CoordFromProto(was)
	if !old.IsCompatibleWith(now) {
		return true
	}
	old.Height, old.Adjustment, now.Height, now.Adjustment = 0, 0, 0, 0 // the move, not the distance
	return old.DistanceTo(now) >= coordMoveAtLeast
}

// reachMoved reports whether the offer says the node is reachable only
// through relays and that is no longer so, or the other way round.
func (p *Provider) reachMoved() bool {
	return p.current != nil && !p.current.Withdrawn && p.relayOnly != nil && p.relayOnly() != p.current.RelayOnly
}

// withdrawNow gossips a withdrawal of the current offer while the node runs.
func (p *Provider) withdrawNow(ctx context.Context) {
	if err := p.withdrawOffer(ctx, false); err != nil {
		p.log.Warn("withdrawal not published", "err", err)
	}
}

// withdraw gossips a withdrawal of the current offer so books drop it now
// rather than at expiry. It runs during shutdown, with its own deadline.
func (p *Provider) withdraw() {
	if p.current == nil || p.current.Withdrawn {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.withdrawOffer(ctx, true); err != nil {
		p.log.Debug("withdrawal not published", "err", err)
		return
	}
	// Linger: closing a TCP connection with unread data in its receive
	// buffer (peers keep sending us pings and gossip) resets it, and the
	// reset can discard the withdrawal before the peer has read it. The
	// network's time, not the node's clock.
	select {
	case <-time.After(withdrawLinger):
	case <-ctx.Done():
	}
}

// withdrawOffer publishes a withdrawal of the current offer: its header
// at a new sequence number.
func (p *Provider) withdrawOffer(ctx context.Context, flush bool) error {
	now := p.clock.Now()
	seq, err := p.nextSeq(ctx, now)
	if err != nil {
		return err
	}
	h := proto.Clone(p.current.Header).(*pb.Header)
	h.Seq, h.CreatedUnixMs = seq, now.UnixMilli()
	w := &pb.Offer{Header: h, Withdrawn: true}
	for _, g := range p.current.Gpus { // its models, so that it is gossiped on the offer's shards (p2p.OfferShards)
		w.Gpus = append(w.Gpus, &pb.GPUGroup{Model: g.Model, Count: g.Count})
	}
	if err := p.publish(ctx, w, flush); err != nil {
		return err
	}
	p.current, p.selling = w, nil
	return nil
}

// Publisher is the provider's view of the swarm: gossip its offers, quote bids.
type Publisher interface {
	Publish(ctx context.Context, kind string, data []byte) error
	PublishFlushed(ctx context.Context, kind string, data []byte) error
	AwaitMesh(ctx context.Context, kind string, wait time.Duration)
	// SendQuote delivers a quote to a bidder, looking it up first if
	// this node is not connected to it.
	SendQuote(ctx context.Context, to peer.ID, env []byte) error
	// Connected says whether this node is connected to p now. It must do
	// no I/O: the quoting loop asks it under a lock.
	Connected(p peer.ID) bool
}
