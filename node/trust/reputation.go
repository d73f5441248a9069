package trust

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Reputation is this node's view of its peers' standing: scores
// computed (market/reputation) from its own lease records, the receipts
// it learned from providers, and what it saw of peers (attestations,
// failed dials, disputes), published whole, so the matcher and the API
// read them without a lock. Its goroutine recomputes them at start, when
// something new was seen, and every recomputeEvery, as receipts and
// observations age, and asks a few providers for receipts every
// learnEvery; asked about one provider, the API asks it at once.
type Reputation struct {
	self      peer.ID
	swarm     string // the swarm's tag, which learned receipts must name
	seeds     []peer.ID
	store     records.Store
	saved     ds.Datastore // observations and learned receipts
	net       ReceiptNet   // nil: learns nothing
	report    func(ctx context.Context, ev []byte) error
	providers func() []peer.ID
	clock     clock.Clock
	log       *slog.Logger

	cur  atomic.Pointer[reputation.Scores]
	kick chan struct{} // 1-buffered: something new to count

	mu    sync.Mutex // guards seeds, obs, keys, seq, known and asked; held for no I/O
	obs   []noted
	keys  []ds.Key // of obs, in the same order
	seq   uint64
	known *learnedCache         // receipts learned from peers
	asked map[peer.ID]time.Time // when each provider was last asked for them
}

// Deps are what the reputation side is built from.
type Deps struct {
	Self  peer.ID
	Swarm string
	Seeds []peer.ID
	Store records.Store
	Saved ds.Datastore
	Net   ReceiptNet
	// Report hands evidence of a peer's rewritten chain on (gossips it);
	// nil: none is.
	Report    func(ctx context.Context, ev []byte) error
	Providers func() []peer.ID // the providers in the book
	Clock     clock.Clock
	Log       *slog.Logger
}

// obsPrefix holds the observations, each under a key that sorts by when
// it was made, so that a restarted node counts what it saw before.
var obsPrefix = ds.NewKey("/reputation/observations")

// noted is an observation, or a dispute when with is set: a GPU UUID that
// Peer and with both claimed.
type noted struct {
	reputation.Observation
	with peer.ID
}

// savedObservation is an observation as stored.
type savedObservation struct {
	Peer   string  `json:"peer"`
	With   string  `json:"with,omitempty"` // the other party of a dispute
	Good   bool    `json:"good"`
	Weight float64 `json:"weight"`
	AtMs   int64   `json:"at_ms"`
	What   string  `json:"what"`
}

// Bounds and pace of the reputation side.
const (
	maxObservations = 10_000 // the oldest go first
	maxWhat         = 200    // bytes of an observation's description kept
	recomputeEvery  = time.Minute
)

// New is the reputation side of d, counting nothing until Load and Run.
func New(d Deps) *Reputation {
	r := &Reputation{
		self: d.Self, swarm: d.Swarm, seeds: d.Seeds, store: d.Store, saved: d.Saved, net: d.Net, report: d.Report, providers: d.Providers,
		clock: d.Clock, log: d.Log, kick: make(chan struct{}, 1), asked: map[peer.ID]time.Time{}, known: newLearnedCache(),
	}
	r.cur.Store(reputation.Compute(reputation.Inputs{Self: d.Self, Seeds: d.Seeds}, d.Clock.Now(), reputation.Config{}))
	return r
}

// SetSeeds makes seeds the peers whose view this node adopts, from the
// next recompute on, which it asks for.
func (r *Reputation) SetSeeds(seeds []peer.ID) {
	r.mu.Lock()
	r.seeds = slices.Clone(seeds)
	r.mu.Unlock()
	r.Poke()
}

// Seeds are the peers whose view this node adopts now.
func (r *Reputation) Seeds() []peer.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seeds)
}

// Load reads the observations and receipts a previous run saved; one
// that does not decode is dropped.
func (r *Reputation) Load(ctx context.Context) error {
	if err := r.loadLearned(ctx); err != nil {
		return err
	}
	res, err := r.saved.Query(ctx, query.Query{Prefix: obsPrefix.String()})
	if err != nil {
		return err
	}
	defer res.Close()
	type entry struct {
		key ds.Key
		obs noted
	}
	var got []entry
	var bad []ds.Key
	for e := range res.Next() {
		if e.Error != nil {
			return e.Error
		}
		var so savedObservation
		if json.Unmarshal(e.Value, &so) != nil {
			bad = append(bad, ds.NewKey(e.Key))
			continue
		}
		p, err := peer.Decode(so.Peer)
		if err != nil {
			bad = append(bad, ds.NewKey(e.Key))
			continue
		}
		var with peer.ID
		if so.With != "" {
			if with, err = peer.Decode(so.With); err != nil {
				bad = append(bad, ds.NewKey(e.Key))
				continue
			}
		}
		got = append(got, entry{ds.NewKey(e.Key), noted{reputation.Observation{Peer: p, Good: so.Good, Weight: so.Weight, At: time.UnixMilli(so.AtMs), What: so.What}, with}})
	}
	slices.SortFunc(got, func(a, b entry) int { return strings.Compare(a.key.String(), b.key.String()) })
	r.mu.Lock()
	for _, e := range got {
		r.obs, r.keys = append(r.obs, e.obs), append(r.keys, e.key)
	}
	r.seq = uint64(len(got))
	r.mu.Unlock()
	for _, k := range bad {
		r.saved.Delete(ctx, k)
	}
	return nil
}

// Reliability is the matcher's source: p's reliability as a provider.
func (r *Reputation) Reliability(p peer.ID) float64 { return r.cur.Load().Reliability(p) }

// Scores returns the scores as last computed.
func (r *Reputation) Scores() *reputation.Scores { return r.cur.Load() }

// Observe counts what this node saw of a peer, saves it, and has the
// scores recomputed soon.
func (r *Reputation) Observe(p peer.ID, good bool, weight float64, what string) {
	r.note(p, "", good, weight, what)
}

// Dispute counts a GPU UUID peers a and b both claimed.
func (r *Reputation) Dispute(a, b peer.ID, uuid string) {
	r.note(a, b, false, 0, "GPU "+uuid+" claimed by both")
}

func (r *Reputation) note(p, with peer.ID, good bool, weight float64, what string) {
	at := r.clock.Now()
	if len(what) > maxWhat {
		what = what[:maxWhat] + "…"
	}
	r.mu.Lock()
	r.seq++
	key := obsPrefix.ChildString(fmt.Sprintf("%016x-%08x", at.UnixNano(), r.seq))
	r.obs = append(r.obs, noted{reputation.Observation{Peer: p, Good: good, Weight: weight, At: at, What: what}, with})
	r.keys = append(r.keys, key)
	var gone []ds.Key
	if over := len(r.obs) - maxObservations; over > 0 {
		gone = slices.Clone(r.keys[:over])
		r.obs, r.keys = slices.Delete(r.obs, 0, over), slices.Delete(r.keys, 0, over)
	}
	r.mu.Unlock()
	so := savedObservation{Peer: p.String(), Good: good, Weight: weight, AtMs: at.UnixMilli(), What: what}
	if with != "" {
		so.With = with.String()
	}
	b, _ := json.Marshal(so)
	ctx := context.Background()
	if err := r.saved.Put(ctx, key, b); err != nil {
		r.log.Warn("observation not saved", "peer", p, "err", err)
	}
	for _, k := range gone {
		r.saved.Delete(ctx, k)
	}
	r.Poke()
}

// Poke has the scores recomputed soon: after a lease ends, say.
func (r *Reputation) Poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run recomputes the scores, and learns receipts, until ctx ends.
func (r *Reputation) Run(ctx context.Context) {
	tick := r.clock.NewTicker(recomputeEvery)
	defer tick.Stop()
	learn := r.clock.NewTicker(LearnEvery)
	defer learn.Stop()
	for {
		if err := r.recompute(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reputation not recomputed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.C():
		case <-learn.C():
			r.learnRound(ctx)
		}
	}
}

// recompute reads the lease records and computes every score afresh.
func (r *Reputation) recompute(ctx context.Context) error {
	recs, err := r.store.All(ctx)
	if err != nil {
		return err
	}
	in := reputation.Inputs{Self: r.self}
	for _, rec := range recs {
		if rc, ok := receiptOf(rec); ok {
			in.Receipts = append(in.Receipts, rc)
		}
	}
	r.mu.Lock()
	in.Seeds = r.seeds
	for _, o := range r.obs {
		if o.with != "" {
			in.Disputes = append(in.Disputes, reputation.Dispute{A: o.Peer, B: o.with, At: o.At})
		} else {
			in.Observations = append(in.Observations, o.Observation)
		}
	}
	r.known.each(func(l learned) { in.Receipts = append(in.Receipts, l.rc) })
	r.mu.Unlock()
	sc := reputation.Compute(in, r.clock.Now(), reputation.Config{})
	r.cur.Store(sc)
	r.mu.Lock()
	gone := r.known.anchor(trustIn(sc))
	r.mu.Unlock()
	r.save(ctx, nil, gone)
	return nil
}

// receiptOf reads what an ended lease's receipt says for reputation; false
// for a lease not ended or a receipt that does not verify. A provider's
// receipt that its renter never countersigned, for a lease that cost
// something, counts against the renter.
func receiptOf(rec *records.Lease) (reputation.Receipt, bool) {
	rc, cs, err := rec.OpenReceipt()
	if err != nil || rc == nil {
		return reputation.Receipt{}, false
	}
	out := counted(rc, len(cs.RenterSignature) > 0 && len(cs.ProviderSignature) > 0)
	if rec.Role == records.Provider && len(cs.RenterSignature) == 0 && rc.AmountMicros > 0 && rc.Outcome != pb.Outcome_OUTCOME_FAILED {
		out.Kind = reputation.RenterFault
	}
	return out, true
}
