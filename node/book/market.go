package book

import (
	"context"
	"crypto/x509"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Market is the node's share of the market: the book every node
// keeps, the signed envelopes it hands to peers that sync, the bids it
// waits on quotes for, and the offenders it excludes.
//
// One goroutine (an owner) owns that state, in the go-libp2p-pubsub
// processLoop shape: the topic readers and book-sync fetches hand it what
// they verified, and public calls hand it a function and wait, honouring
// ctx. Readers need no call: the book's snapshots are immutable, and the
// offenders are published as an immutable set. The owner does no I/O;
// what must be stored (offenders, sequence numbers) is written by the
// caller or the maintenance goroutine, outside it. Whom it synced, the
// sync goroutine alone keeps.
type Market struct {
	Book       *market.Book // written by the owner only; snapshots for all
	Matcher    *market.Matcher
	rel        market.Reliability // the matcher's sources, for matcherFor
	rtt        market.RTTs
	limits     market.Limits
	self       peer.ID
	roots      *x509.CertPool
	bookLimits market.BookLimits
	known      func(peer.ID) bool
	sources    func(peer.ID) bool // book-sync sources the operator chose
	Validator  *p2p.MarketValidator
	seqs       *p2p.SeqGuard
	Net        Syncer
	store      ds.Datastore // offenders
	clock      clock.Clock
	log        *slog.Logger

	offenders atomic.Pointer[map[peer.ID]bool]        // replaced, never changed
	OnBid     func(context.Context, peer.ID, *pb.Bid) // the provider's, or nil; with the relay
	Received  func(kind string)                       // counts deliveries, or nil
	// booksSynced counts the book syncs that completed: a rental waits
	// for a few before it ranks a book it has only begun to fill.
	booksSynced atomic.Int64
	shards      shards

	own *owner.Owner[*State]
	wg  sync.WaitGroup // readers, sync, maintenance
}

// State is what the owner goroutine alone touches.
type State struct {
	envelopes map[offerKey]heldEnvelope
	pending   map[string]*pendingBid // by bid ID
}

// offerKey names an offer in the book: its issuer and ID.
type offerKey struct {
	issuer peer.ID
	id     string
}

// heldEnvelope is the latest signed envelope of an offer: the offer, or
// its withdrawal, kept until the offer's expiry so that a peer syncing
// from a book that missed the withdrawal still learns of it.
type heldEnvelope struct {
	env     []byte
	seq     uint64
	expires int64 // Unix ms
}

// pendingBid collects the quotes that come back for one of our bids.
type pendingBid struct {
	bid    *pb.Bid
	quotes []*pb.Quote
}

// Deps are what the market side is built from.
type Deps struct {
	Self  peer.ID
	Roots *x509.CertPool // CC roots, for evidence; nil: none
	Book  market.BookLimits
	Known func(peer.ID) bool // a provider attested (a connection is not trust); may be nil
	// Sources are the peers whose books it takes whole (the configured
	// bootstrap peers: p2p.MarketValidator.WithSyncSources); may be nil.
	Sources func(peer.ID) bool
	Net     Syncer
	Store   ds.Batching // offenders and sequence numbers
	Rel     market.Reliability
	Rtt     market.RTTs
	Clock   clock.Clock
	Log     *slog.Logger
	Limits  market.Limits
	// Follow are the shards (p2p.FamilyShard) whose offers and bids the
	// market hears; nil: every shard, on the kinds' own topics.
	Follow []string
	// KeepShard, if not nil, is called once the market follows a shard,
	// to keep followers of it connected (p2p.Discovery.KeepShard).
	KeepShard func(shard string) error
}

// New builds the market side; it reads and starts nothing.
func New(d Deps) *Market {
	m := &Market{
		Book: market.NewBook(), limits: d.Limits, Net: d.Net, store: d.Store, clock: d.Clock, log: d.Log,
		self: d.Self, roots: d.Roots, bookLimits: d.Book, known: d.Known, sources: d.Sources, rel: d.Rel, rtt: d.Rtt,
		own: owner.New[*State](),
	}
	m.offenders.Store(&map[peer.ID]bool{})
	m.shards.all, m.shards.keep = d.Follow == nil, d.KeepShard
	if !m.shards.all {
		m.shards.followed = []string{}
		if err := m.Follow(d.Follow...); err != nil {
			m.log.Warn("shards not followed", "err", err)
		}
	}
	m.Matcher = market.NewMatcher(market.DefaultMatchConfig(), d.Rel, d.Rtt).WithExcluder(m)
	return m
}

// Open reads the recorded offenders and sequence numbers and starts the
// owner; it installs nothing on the network.
func (m *Market) Open(ctx context.Context, store ds.Batching) error {
	var err error
	if m.seqs, err = p2p.OpenSeqGuard(ctx, store); err != nil {
		return err
	}
	vouched := func(p peer.ID) bool { return m.rank(p) > market.RankUnknown }
	m.seqs.SetLimit(p2p.TopicOffers, m.bookLimits.Offers, vouched)
	m.seqs.SetLimit(p2p.TopicBids, m.bookLimits.Bids, vouched)
	m.Validator = p2p.NewMarketValidator(m.limits, m.seqs, m.clock.Now, m.log).WithCCRoots(m.roots).WithVouched(vouched).WithSyncSources(m.sources)
	if err := m.loadOffenders(ctx); err != nil {
		return err
	}
	st := &State{envelopes: make(map[offerKey]heldEnvelope), pending: make(map[string]*pendingBid)}
	// Only the owner writes the book, so evictions come on the owner.
	m.Book.SetLimits(m.bookLimits, m.rank, func(issuer peer.ID, id string) { delete(st.envelopes, offerKey{issuer, id}) })
	m.own.Start(st)
	return nil
}

// rank is how the book ranks an issuer when it is full: this node's own
// messages first, then those of an issuer known (vouchedFor: a provider
// this node attested; a connection is not trust), then the rest.
func (m *Market) rank(p peer.ID) int {
	switch {
	case p == m.self:
		return market.RankOwn
	case m.known != nil && m.known(p):
		return market.RankKnown
	}
	return market.RankUnknown
}

// offer hands the owner an offer verified by a validator, with its
// envelope: the owner puts it into the book and, when the book takes it,
// keeps its envelope for peers that sync, in one step, so the envelope
// held is always that of the seq the book holds.
func (m *Market) offer(ctx context.Context, o *pb.Offer, env []byte) {
	m.own.Post(ctx, func(st *State) {
		if err := m.Book.PutOffer(o, m.clock.Now()); err != nil {
			return // stale or expired: the book keeps what it had, and so do we
		}
		h := o.Header
		st.envelopes[offerKey{market.Issuer(o), h.Id}] = heldEnvelope{env: env, seq: h.Seq, expires: h.ExpiresUnixMs}
	})
}

// bid hands the owner a verified bid for the book.
func (m *Market) bid(ctx context.Context, b *pb.Bid) {
	m.own.Post(ctx, func(*State) { m.Book.PutBid(b, m.clock.Now()) })
}

// Do runs f on the owner and waits for it.
func (m *Market) Do(ctx context.Context, f func(*State)) error { return m.own.Do(ctx, f) }

// Snapshot is the book as it is now, immutable.
func (m *Market) Snapshot() *market.Snapshot { return m.Book.Snapshot() }

// Providers are the issuers of the offers in the book, each once.
func (m *Market) Providers() []peer.ID { return m.Snapshot().Issuers() }

// Synced counts the book syncs that completed.
func (m *Market) Synced() int64 { return m.booksSynced.Load() }

// SyncPeers are the connected peers that serve book sync.
func (m *Market) SyncPeers() []peer.ID { return m.Net.SyncPeers() }

// MatcherFor is the matcher for a request: the node's, or one on the same
// sources that weighs RTT as the request asks; holding offers to its
// query (where) too.
func (m *Market) MatcherFor(req api.BidRequest) *market.Matcher {
	mt := m.Matcher
	if req.LatencyWeight != nil {
		cfg := market.DefaultMatchConfig()
		cfg.Beta = *req.LatencyWeight
		mt = market.NewMatcher(cfg, m.rel, m.rtt).WithExcluder(m)
	}
	if q, err := market.ParseQuery(req.Where); err == nil && !q.Empty() { // BuildBid refused a bad one
		mt = mt.WithQuery(q)
	}
	return mt
}

// Excluded tells the matcher to skip proven offenders.
func (m *Market) Excluded(p peer.ID) bool { return (*m.offenders.Load())[p] }

// EnvelopesNow copies out the envelopes held, for a peer that syncs.
func (m *Market) EnvelopesNow(ctx context.Context) ([][]byte, error) {
	var out [][]byte
	err := m.Do(ctx, func(st *State) {
		out = make([][]byte, 0, len(st.envelopes))
		for _, h := range st.envelopes {
			out = append(out, h.env)
		}
	})
	return out, err
}

// expire drops expired offers, bids, envelopes and pending bids.
func (m *Market) expire(ctx context.Context, now time.Time) error {
	return m.Do(ctx, func(st *State) {
		m.Book.Expire(now)
		for k, h := range st.envelopes {
			if h.expires <= now.UnixMilli() {
				delete(st.envelopes, k)
			}
		}
		for id, p := range st.pending {
			if p.bid.Header.ExpiresUnixMs < now.UnixMilli() {
				delete(st.pending, id)
			}
		}
	})
}

var evidencePrefix = ds.NewKey("/evidence")

// maxOffenders bounds the offenders a node records: proof costs a cheater
// a key, and keys are free.
const maxOffenders = 10_000

// RecordOffenders remembers the offenders that verified evidence proves,
// in the published set and then in the datastore with the evidence, so a
// restart does not forgive them and re-checks the proof. A node never
// records itself: its own documents are what it knows to be true.
func (m *Market) RecordOffenders(ctx context.Context, offenders []peer.ID, evidence []byte) {
	var fresh []peer.ID
	m.Do(ctx, func(*State) {
		set := *m.offenders.Load()
		next := make(map[peer.ID]bool, len(set)+len(offenders))
		for p := range set {
			next[p] = true
		}
		for _, p := range offenders {
			if p != m.self && !next[p] && len(next) < maxOffenders {
				next[p] = true
				fresh = append(fresh, p)
			}
		}
		m.offenders.Store(&next)
	})
	for _, p := range fresh {
		m.log.Warn("offender recorded from evidence", "peer", p)
		if err := m.store.Put(ctx, evidencePrefix.ChildString(p.String()), evidence); err != nil {
			m.log.Warn("offender not persisted", "peer", p, "err", err)
		}
	}
}

// loadOffenders reads the offenders recorded before a restart, each with
// the evidence that proved it, checked again: a record whose evidence no
// longer proves its peer an offender (an older release's, or this node's
// own peer) is forgiven and deleted.
func (m *Market) loadOffenders(ctx context.Context) error {
	res, err := m.store.Query(ctx, query.Query{Prefix: evidencePrefix.String()})
	if err != nil {
		return err
	}
	defer res.Close()
	set := map[peer.ID]bool{}
	var forgiven []ds.Key
	for e := range res.Next() {
		if e.Error != nil {
			return e.Error
		}
		k := ds.NewKey(e.Key)
		p, err := peer.Decode(k.BaseNamespace())
		if err != nil {
			continue
		}
		proven, err := attest.VerifyEvidence(e.Value, m.limits.Swarm, m.roots)
		if err != nil || p == m.self || !slices.Contains(proven, p) {
			m.log.Warn("offender forgiven: its recorded evidence does not prove it", "peer", p, "err", err)
			forgiven = append(forgiven, k)
			continue
		}
		set[p] = true
	}
	for _, k := range forgiven {
		if err := m.store.Delete(ctx, k); err != nil {
			return err
		}
	}
	m.offenders.Store(&set)
	return nil
}

// Close waits for the goroutines start started (their ctx must have
// ended), stops the owner, and writes the sequence numbers not yet
// flushed.
func (m *Market) Close() error {
	m.wg.Wait()
	m.own.Stop()
	if m.seqs == nil {
		return nil
	}
	return m.seqs.Flush(context.Background())
}

// Syncer is the market side's view: fetch the books of peers.
type Syncer interface {
	// FetchShards reads the offers of p's book of shards (every shard
	// where shards is nil), less what held holds (a peer of the last
	// version sends its book whole, and only those shards' are kept).
	FetchShards(ctx context.Context, p peer.ID, shards []string, held *p2p.BookDigest, each func([]byte)) (int, error)
	FetchEvidence(ctx context.Context, p peer.ID, each func([]byte)) (int, error)
	// SyncPeers are the connected peers that serve book sync.
	SyncPeers() []peer.ID
}
