package trust

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/internal/fanout"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Receipts learned from peers: others' co-signed receipts, which a node
// that never dealt with a provider counts by the trust of the renters
// that signed them. They are stored under learnedPrefix by the hash of
// their body, within the bounds of learnedCache.
var learnedPrefix = ds.NewKey("/reputation/receipts")

const (
	// LearnEvery is how often the node asks a few providers in its book
	// for their receipts; learnAgain how long it waits before asking one
	// again, and learnPerRound how many it asks at a time.
	LearnEvery    = 30 * time.Second
	learnAgain    = 30 * time.Minute
	learnPerRound = 8
	// receiptSkew is how far past this node's clock a learned receipt
	// may end: its signers' clocks may run that much ahead.
	receiptSkew = time.Minute
)

// learned is one receipt learned from a peer.
type learned struct {
	key ds.Key
	env []byte // marshalled CoSigned
	rc  reputation.Receipt
}

// ReceiptNet is what learning receipts needs of the network.
type ReceiptNet interface {
	FetchReceipts(ctx context.Context, p, subject peer.ID, each func([]byte)) (int, error)
	// FetchChain reads p's chain of lease records as q asks.
	FetchChain(ctx context.Context, p peer.ID, q p2p.ChainQuery, each func([]byte)) (int, error)
}

// openLearned verifies a receipt a peer handed over: both parties signed
// it, it names subject, it was made in this swarm, this node is not a
// party (its own records say what it saw), and its dates hold: it ends
// no later than receiptSkew past now, and meters no more than its span.
// It returns the receipt as it counts and as it is kept, under the hash
// of its body. ErrNotForUs is not a fault of the sender's.
func openLearned(env []byte, subject, self peer.ID, swarm string, now time.Time) (learned, error) {
	if len(env) > p2p.MaxReceiptSize {
		return learned{}, fmt.Errorf("receipt of %d bytes", len(env))
	}
	cs := new(pb.CoSigned)
	if err := market.Unmarshal(env, cs); err != nil {
		return learned{}, err
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](cs, market.Renter, market.Provider)
	if err != nil {
		return learned{}, err
	}
	renter, provider := peer.ID(rc.Renter), peer.ID(rc.Provider)
	span := max(0, rc.EndUnixMs-rc.StartUnixMs) / 1000 // seconds
	switch {
	case rc.Swarm != swarm:
		return learned{}, fmt.Errorf("a receipt of swarm %q", rc.Swarm)
	case renter != subject && provider != subject:
		return learned{}, fmt.Errorf("a receipt of %s and %s, not of %s", renter, provider, subject)
	case renter == self || provider == self:
		return learned{}, errNotForUs
	case rc.EndUnixMs > now.Add(receiptSkew).UnixMilli():
		return learned{}, fmt.Errorf("a receipt ending %s, after this node's clock (%s) by more than %s",
			time.UnixMilli(rc.EndUnixMs).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), receiptSkew)
	case rc.MeteredSeconds > uint64(span)+uint64(receiptSkew.Seconds()):
		return learned{}, fmt.Errorf("a receipt metering %d s between a start and an end %d s apart", rc.MeteredSeconds, span)
	}
	key := learnedPrefix.ChildString(hex.EncodeToString(market.BodyHash(cs)))
	return learned{key: key, env: env, rc: counted(rc, true)}, nil
}

// counted is what a receipt says for reputation, as a vote of its kind.
func counted(rc *pb.Receipt, cosigned bool) reputation.Receipt {
	return reputation.Receipt{Renter: peer.ID(rc.Renter), Provider: peer.ID(rc.Provider), Kind: reputation.KindOf(rc.Outcome),
		Hours: float64(rc.MeteredSeconds) / 3600, At: time.UnixMilli(rc.EndUnixMs), CoSigned: cosigned}
}

var errNotForUs = errors.New("a receipt of this node's own")

// learn keeps the receipts in envs that verify; it returns how many it
// kept that it did not hold.
func (r *Reputation) learn(ctx context.Context, subject peer.ID, envs [][]byte) int {
	var fresh []learned
	now := r.clock.Now()
	for _, env := range envs {
		l, err := openLearned(env, subject, r.self, r.swarm, now)
		if err != nil {
			if !errors.Is(err, errNotForUs) {
				r.log.Debug("receipt refused", "from", subject, "err", err)
			}
			continue
		}
		fresh = append(fresh, l)
	}
	return r.keep(ctx, fresh)
}

// keep holds the verified receipts in fresh, within the cache's bounds,
// and saves what it holds of them; it returns how many it did not hold.
func (r *Reputation) keep(ctx context.Context, fresh []learned) int {
	trust := trustIn(r.cur.Load())
	r.mu.Lock()
	var added []learned
	var gone []ds.Key
	for _, l := range fresh {
		if r.known.has(l.key) {
			continue
		}
		added = append(added, l)
		gone = append(gone, r.known.add(l, partyTrust(l.rc, trust))...)
	}
	r.mu.Unlock()
	r.save(ctx, added, gone)
	if len(added) > 0 {
		r.Poke() // and the recompute anchors what trust now reaches
	}
	return len(added)
}

// save saves the receipts added and deletes those gone, which may hold
// some of added.
func (r *Reputation) save(ctx context.Context, added []learned, gone []ds.Key) {
	dropped := make(map[ds.Key]bool, len(gone))
	for _, k := range gone {
		dropped[k] = true
	}
	for _, l := range added {
		if dropped[l.key] {
			continue
		}
		if err := r.saved.Put(ctx, l.key, l.env); err != nil {
			r.log.Warn("receipt not saved", "err", err)
		}
	}
	for _, k := range gone {
		r.saved.Delete(ctx, k)
	}
}

// bodyOf is a marshalled CoSigned's body; nil if it does not decode.
func bodyOf(env []byte) []byte {
	cs := new(pb.CoSigned)
	if market.Unmarshal(env, cs) != nil {
		return nil
	}
	return cs.Body
}

// loadLearned reads the receipts and complaints a previous run learned,
// checking each again; one that does not verify is dropped.
func (r *Reputation) loadLearned(ctx context.Context) error {
	if err := r.loadPrefix(ctx, learnedPrefix, openLearnedAny); err != nil {
		return err
	}
	return r.loadPrefix(ctx, complaintPrefix, openComplaint)
}

// loadPrefix reads what was learned and stored under prefix, each opened
// by open.
func (r *Reputation) loadPrefix(ctx context.Context, prefix ds.Key, open func(env []byte, self peer.ID, swarm string) (reputation.Receipt, error)) error {
	res, err := r.saved.Query(ctx, query.Query{Prefix: prefix.String()})
	if err != nil {
		return err
	}
	defer res.Close()
	var bad []ds.Key
	r.mu.Lock()
	for e := range res.Next() {
		if e.Error != nil {
			r.mu.Unlock()
			return e.Error
		}
		env := e.Value
		rc, err := open(env, r.self, r.swarm)
		if err != nil {
			bad = append(bad, ds.NewKey(e.Key))
			continue
		}
		// Held as anchored until the first recompute ranks them.
		r.known.add(learned{key: ds.NewKey(e.Key), env: env, rc: rc}, 1)
	}
	r.mu.Unlock()
	for _, k := range bad {
		r.saved.Delete(ctx, k)
	}
	return nil
}

// openLearnedAny reads a stored receipt, which was verified when it was
// learned (the datastore is this node's alone): it decodes the body
// without checking the signatures again, which for a full store would
// take seconds at every start.
func openLearnedAny(env []byte, self peer.ID, swarm string) (reputation.Receipt, error) {
	rc := new(pb.Receipt)
	if err := market.Unmarshal(bodyOf(env), rc); err != nil {
		return reputation.Receipt{}, err
	}
	renter, provider := peer.ID(rc.Renter), peer.ID(rc.Provider)
	if rc.Swarm != swarm || renter == self || provider == self || renter == provider {
		return reputation.Receipt{}, errNotForUs
	}
	return counted(rc, true), nil
}

// ReceiptsOf serves ReceiptsProtocol: the co-signed receipts this node
// holds that name subject, its own and those it learned, newest first.
func (r *Reputation) ReceiptsOf(ctx context.Context, subject peer.ID) ([][]byte, error) {
	recs, err := r.store.All(ctx)
	if err != nil {
		return nil, err
	}
	type held struct {
		env []byte
		at  time.Time
	}
	var out []held
	for _, rec := range recs {
		rc, cs, err := rec.OpenReceipt()
		if err != nil || rc == nil || len(cs.RenterSignature) == 0 || len(cs.ProviderSignature) == 0 {
			continue
		}
		if peer.ID(rc.Renter) == subject || peer.ID(rc.Provider) == subject {
			out = append(out, held{rec.Receipt, time.UnixMilli(rc.EndUnixMs)})
		}
	}
	r.mu.Lock()
	r.known.each(func(l learned) {
		if l.rc.Renter == subject || l.rc.Provider == subject {
			out = append(out, held{l.env, l.rc.At})
		}
	})
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b held) int { return b.at.Compare(a.at) })
	envs := make([][]byte, 0, min(len(out), p2p.MaxReceiptsReply))
	for _, h := range out[:min(len(out), p2p.MaxReceiptsReply)] {
		envs = append(envs, h.env)
	}
	return envs, nil
}

// learnRound asks up to learnPerRound providers in the book, not asked
// within learnAgain, for the receipts they hold of themselves.
func (r *Reputation) learnRound(ctx context.Context) {
	if r.net == nil || r.providers == nil {
		return
	}
	var ask []peer.ID
	for _, p := range r.providers() {
		if r.due(p) {
			if ask = append(ask, p); len(ask) == learnPerRound {
				break
			}
		}
	}
	for _, p := range ask {
		r.learnFrom(ctx, p)
	}
}

// due marks p asked now, and reports whether it was due: not this node,
// and not asked within learnAgain.
func (r *Reputation) due(p peer.ID) bool {
	if p == r.self {
		return false
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.asked[p]) < learnAgain {
		return false
	}
	r.asked[p] = now
	if len(r.asked) > maxAsked {
		for q, at := range r.asked { // forget the long ago
			if now.Sub(at) > learnAgain {
				delete(r.asked, q)
			}
		}
	}
	return true
}

// maxAsked is how many providers' last asking is remembered before the
// long ago are forgotten.
const maxAsked = 10_000

// learnFrom asks p for the receipts it holds of itself, and reads its
// chain and its latest counterparties' for the complaints of it they
// hold; it keeps those that verify and reports how many it did not hold.
func (r *Reputation) learnFrom(ctx context.Context, p peer.ID) int {
	var envs [][]byte
	if _, err := r.net.FetchReceipts(ctx, p, p, func(env []byte) { envs = append(envs, env) }); err != nil {
		r.log.Debug("receipts not fetched", "peer", p, "err", err)
	}
	return r.learn(ctx, p, envs) + r.learnChains(ctx, p)
}

// LearnNow asks provider p for its receipts at once, if it is due, and
// recomputes the scores when it learned any: what someone asking about
// a provider this node never dealt with wants.
func (r *Reputation) LearnNow(ctx context.Context, p peer.ID) {
	if r.net == nil || !r.due(p) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, learnNowFor)
	defer cancel()
	if r.learnFrom(ctx, p) > 0 {
		if err := r.recompute(ctx); err != nil {
			r.log.Warn("reputation not recomputed", "err", err)
		}
	}
}

// learnNowFor bounds an asking at once.
const learnNowFor = 5 * time.Second

// LearnFor asks the providers in ps that are due for their receipts, in
// parallel, within learnForRent, and recomputes the scores when it
// learned any: what a rental does with its best candidates before it
// tries them. It reports whether it learned anything.
func (r *Reputation) LearnFor(ctx context.Context, ps []peer.ID) bool {
	if r.net == nil {
		return false
	}
	learned := fanout.Any(ctx, learnForRent, ps, func(ctx context.Context, p peer.ID) bool {
		return r.due(p) && r.learnFrom(ctx, p) > 0
	})
	if !learned {
		return false
	}
	if err := r.recompute(ctx); err != nil {
		r.log.Warn("reputation not recomputed", "err", err)
		return false
	}
	return true
}

// learnForRent bounds what a rental waits for its candidates' receipts.
const learnForRent = 2 * time.Second
