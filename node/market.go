package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/namespace"
	"github.com/ipfs/go-datastore/query"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// offerKey names an offer in the book: its issuer and ID.
type offerKey struct {
	issuer peer.ID
	id     string
}

// marketSide is the node's share of the market: the validators on the
// gossip topics, the book every node keeps, the signed envelopes it hands
// to peers that sync, and the bids it waits on quotes for. The book and
// envelopes are written only by the offer reader goroutine; the mutex
// guards the envelopes and pending bids for the API's readers.
type marketSide struct {
	limits    market.Limits
	seqs      *p2p.SeqGuard
	validator *p2p.MarketValidator
	book      *market.Book
	matcher   *market.Matcher

	mu        sync.Mutex
	envelopes map[offerKey]heldEnvelope
	pending   map[string]*pendingBid // by bid ID
	synced    map[peer.ID]bool       // peers whose book we fetched this connection
	offenders map[peer.ID]bool       // proven cheats, excluded from matching
}

// Excluded tells the matcher to skip proven offenders.
func (m *marketSide) Excluded(p peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.offenders[p]
}

var evidencePrefix = ds.NewKey("/evidence")

// recordOffenders remembers offenders proven by verified evidence, in
// memory and in the datastore, so a restart does not forgive them.
func (n *Node) recordOffenders(ctx context.Context, offenders []peer.ID) {
	m := n.market
	for _, p := range offenders {
		m.mu.Lock()
		known := m.offenders[p]
		m.offenders[p] = true
		m.mu.Unlock()
		if known {
			continue
		}
		n.log.Warn("offender recorded from evidence", "peer", p)
		if err := n.store.Put(ctx, evidencePrefix.ChildString(p.String()), []byte{1}); err != nil {
			n.log.Warn("offender not persisted", "peer", p, "err", err)
		}
	}
}

// loadOffenders reads the offenders recorded before a restart.
func (n *Node) loadOffenders(ctx context.Context) error {
	res, err := n.store.Query(ctx, query.Query{Prefix: evidencePrefix.String(), KeysOnly: true})
	if err != nil {
		return err
	}
	defer res.Close()
	for e := range res.Next() {
		if e.Error != nil {
			return e.Error
		}
		if p, err := peer.Decode(ds.NewKey(e.Key).BaseNamespace()); err == nil {
			n.market.offenders[p] = true
		}
	}
	return nil
}

// pendingBid collects the quotes that come back for one of our bids.
type pendingBid struct {
	bid    *pb.Bid
	quotes []*pb.Quote
}

// startMarket installs the validators and the book sync and quote
// protocols; the topic readers feed it.
func (n *Node) startMarket(ctx context.Context) error {
	m := &marketSide{
		limits:    market.DefaultLimits(),
		seqs:      p2p.NewSeqGuard(namespace.Wrap(n.store, ds.NewKey("/market"))),
		book:      market.NewBook(),
		envelopes: make(map[offerKey]heldEnvelope),
		pending:   make(map[string]*pendingBid),
		synced:    make(map[peer.ID]bool),
		offenders: make(map[peer.ID]bool),
	}
	m.matcher = market.NewMatcher(market.DefaultMatchConfig(), nil, peerstoreRTT{n}).WithExcluder(m)
	m.validator = p2p.NewMarketValidator(m.limits, m.seqs, time.Now, n.opts.Logger.With("subsystem", LogP2P))
	n.market = m
	if err := n.loadOffenders(ctx); err != nil {
		return fmt.Errorf("load recorded offenders: %w", err)
	}
	if err := m.validator.Install(n.gossip); err != nil {
		return err
	}
	p2p.ServeBookSync(n.host, m.snapshotEnvelopes)
	p2p.ServeQuotes(n.host, n.receiveQuote)
	n.host.Network().Notify(&network.NotifyBundle{DisconnectedF: func(net network.Network, c network.Conn) {
		if net.Connectedness(c.RemotePeer()) != network.Connected {
			m.forgetSync(c.RemotePeer())
		}
	}})
	joins, err := n.gossip.Topic(p2p.TopicOffers).EventHandler()
	if err != nil {
		return fmt.Errorf("offers topic events: %w", err)
	}
	n.wg.Add(2)
	go n.syncBooks(ctx, joins)
	go n.expireLoop(ctx)
	return nil
}

// peerstoreRTT gives the matcher the peerstore's latency EWMA.
type peerstoreRTT struct{ n *Node }

func (r peerstoreRTT) RTT(p peer.ID) (time.Duration, bool) {
	d := r.n.host.Peerstore().LatencyEWMA(p)
	return d, d > 0
}

// heldEnvelope is the latest signed envelope of an offer: the offer, or
// its withdrawal, kept until the offer's expiry so that a peer syncing
// from a book that missed the withdrawal still learns of it.
type heldEnvelope struct {
	env     []byte
	expires int64 // Unix ms
}

// ingestOffer puts a verified offer (or withdrawal) into the book and
// keeps its envelope for peers that sync.
func (n *Node) ingestOffer(o *pb.Offer, env []byte) {
	m := n.market
	if err := m.book.PutOffer(o, time.Now()); err != nil {
		return // stale or expired: the book keeps what it had, and so do we
	}
	k := offerKey{market.Issuer(o), o.Header.Id}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.envelopes[k] = heldEnvelope{env: env, expires: o.Header.ExpiresUnixMs}
}

func (m *marketSide) snapshotEnvelopes() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]byte, 0, len(m.envelopes))
	for _, h := range m.envelopes {
		out = append(out, h.env)
	}
	return out
}

// resyncInterval is the longest wait between syncs with one random peer,
// which make books converge even when a gossiped offer was missed; the
// first come sooner (5 s, doubling).
const resyncInterval = 2 * time.Minute

// syncBooks fetches the book of every peer that joins the offers topic,
// once per connection (it is subscribed then, so what is published later
// reaches it by gossip), and of one random peer now and then, checking each
// offer as if it were gossiped.
func (n *Node) syncBooks(ctx context.Context, joins *pubsub.TopicEventHandler) {
	defer n.wg.Done()
	defer joins.Cancel()
	events := make(chan peer.ID)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			ev, err := joins.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type != pubsub.PeerJoin {
				continue
			}
			select {
			case events <- ev.Peer:
			case <-ctx.Done():
				return
			}
		}
	}()
	sem := make(chan struct{}, 4)
	joinSyncs := syncBudget{burst: joinSyncBurst, every: joinSyncEvery}
	wait := 5 * time.Second
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		var p peer.ID
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			wait = min(2*wait, resyncInterval)
			timer.Reset(wait)
			if p = n.randomSyncPeer(); p == "" {
				continue
			}
		case p = <-events:
			if !n.market.firstSync(p) || !joinSyncs.allow(time.Now()) {
				continue
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() { <-sem }()
			n.fetchBook(ctx, p)
		}()
	}
}

// A node syncs with the first joinSyncBurst peers that join the offers
// topic, then with at most one more per joinSyncEvery: a whole book per
// joining peer would not scale to a swarm of thousands, and the periodic
// resync catches anything the gossip missed.
const (
	joinSyncBurst = 3
	joinSyncEvery = 10 * time.Second
)

// syncBudget is a token bucket for join-triggered syncs; only the
// syncBooks goroutine uses it.
type syncBudget struct {
	burst  int
	every  time.Duration
	tokens int
	last   time.Time
	primed bool
}

func (b *syncBudget) allow(now time.Time) bool {
	if !b.primed {
		b.tokens, b.last, b.primed = b.burst, now, true
	}
	if gained := int(now.Sub(b.last) / b.every); gained > 0 {
		b.tokens, b.last = min(b.burst, b.tokens+gained), b.last.Add(time.Duration(gained)*b.every)
	}
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}

// randomSyncPeer picks a connected peer that serves book sync, or "".
func (n *Node) randomSyncPeer() peer.ID {
	peers := n.host.Network().Peers()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	for _, p := range peers {
		if ok, _ := n.host.Peerstore().SupportsProtocols(p, p2p.BookSyncProtocol); len(ok) > 0 {
			return p
		}
	}
	return ""
}

func (m *marketSide) firstSync(p peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.synced[p] {
		return false
	}
	m.synced[p] = true
	return true
}

// forgetSync lets a peer that reconnects be synced again.
func (m *marketSide) forgetSync(p peer.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.synced, p)
}

func (n *Node) fetchBook(ctx context.Context, p peer.ID) {
	got, err := p2p.FetchBook(ctx, n.host, p, func(env []byte) {
		if o, res := n.market.validator.CheckSyncedOffer(ctx, env); res == pubsub.ValidationAccept {
			n.ingestOffer(o, env)
		}
	})
	if err != nil {
		n.log.Debug("book sync failed", "peer", p, "err", err)
		return
	}
	n.log.Debug("book synced", "peer", p, "offers", got)
}

// expireLoop drops expired offers and bids from the book every 30 s.
func (n *Node) expireLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.expire(time.Now())
	}
}

func (n *Node) expire(now time.Time) {
	m := n.market
	m.book.Expire(now)
	if _, err := m.seqs.Prune(context.Background(), now.UnixMilli()); err != nil {
		n.log.Warn("pruning sequence numbers failed", "err", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, h := range m.envelopes {
		if h.expires <= now.UnixMilli() {
			delete(m.envelopes, k)
		}
	}
	for id, pb := range m.pending {
		if pb.bid.Header.ExpiresUnixMs < now.UnixMilli() {
			delete(m.pending, id)
		}
	}
}

// awaitMesh returns once this node has a mesh peer on a topic (both ends
// have streams then, so a publication reaches the swarm rather than no
// one), or a topic peer known for a heartbeat and a half (a peer that just
// left and came back is kept out of the mesh for a minute of backoff, but
// flood publishing still reaches it), or after wait, or when ctx ends.
func (n *Node) awaitMesh(ctx context.Context, kind string, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var peersSince time.Time
	for len(n.gossip.Mesh(kind)) == 0 {
		switch {
		case len(n.gossip.Topic(kind).ListPeers()) == 0:
			peersSince = time.Time{}
		case peersSince.IsZero():
			peersSince = time.Now()
		case time.Since(peersSince) > 1500*time.Millisecond:
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
