package market

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// The book as a state machine: an interpreter of operations (put a new
// offer, replace one, put a stale one, withdraw, let time pass and
// expire, put bids, snapshot, list, match; one at a time or in bulk, and
// through the signed envelope's decoder) that applies each to a Book and
// to a model of it, a map of what each key holds and a linear scan, and
// compares them after every step. TestPropBookIsItsModel draws the
// operations with rapid; FuzzBookStateMachine decodes them from the
// fuzzer's bytes. Both choose through a chooser, whose 0 is always the
// usual answer, so rapid shrinks and short fuzz inputs lean to plain
// books.

// bookMachine drives a Book and its model through the same operations.
type bookMachine struct {
	t       failer
	book    *Book
	now     time.Time
	offers  modelSide[*pb.Offer]
	bids    modelSide[*pb.Bid]
	keys    []bookKey // every offer key used, in order of first use
	known   map[bookKey]bool
	nextID  int
	evicted []bookKey // as the book told
	// held is an old snapshot, with what it showed then.
	held      *Snapshot
	heldAt    []*pb.Offer
	heldViews []*bucketView
	matcher   *Matcher
	bounded   bool     // whether bulk operations have a budget:
	budget    int      // the offers they may still put
	log       []string // the operations so far, for a failure's report
	// canonical keeps the catalog's names of the offers' models (its
	// lookups are slow beside the book's; offers never change).
	canonical map[*pb.Offer][]string
	buckets   map[bucketKey]int // the model's live offers by bucket
}

// Operations, by the number a chooser picks.
const (
	opPut = iota
	opReplace
	opStale
	opWithdraw
	opAdvance
	opBid
	opSnapshot
	opMatch
	opFind
	opBulkPut
	opBulkChange
	opSigned
	opSignedBid
	nOps
)

var opNames = [nOps]string{"Put", "Replace", "Stale", "Withdraw", "Advance", "Bid", "Snapshot", "Match", "Find", "BulkPut", "BulkChange", "Signed", "SignedBid"}

// newBookMachine starts an empty book at mtNow, bounded or not as c
// chooses: a small bound makes the book evict.
func newBookMachine(t failer, c chooser) *bookMachine {
	m := &bookMachine{t: t, book: NewBook(), now: mtNow, known: map[bookKey]bool{}, canonical: map[*pb.Offer][]string{}, buckets: map[bucketKey]int{}}
	m.offers = modelSide[*pb.Offer]{max: oneOf(c, "offer_cap", 0, 30, 200, 700), keys: map[bookKey]*modelEntry[*pb.Offer]{}}
	m.offers.changed = func(old, new *pb.Offer) {
		if old != nil {
			m.countBuckets(old, -1)
		}
		if new != nil {
			m.countBuckets(new, 1)
		}
	}
	m.bids = modelSide[*pb.Bid]{max: oneOf(c, "bid_cap", 0, 4), keys: map[bookKey]*modelEntry[*pb.Bid]{}}
	var rank Ranker = machineRank
	if oneOf(c, "unranked", false, true) {
		rank = nil
	}
	m.offers.rank, m.bids.rank = rank, rank
	m.book.SetLimits(BookLimits{Offers: m.offers.max, Bids: m.bids.max}, rank, func(issuer peer.ID, id string) {
		m.evicted = append(m.evicted, bookKey{issuer, id})
	})
	src := mtSources{rel: map[peer.ID]float64{}, rtt: map[peer.ID]time.Duration{}}
	for i, is := range machineIssuers {
		src.rel[is.id] = []float64{1, 0.9, 0.7}[i%3]
		if i%2 == 0 {
			src.rtt[is.id] = time.Duration(10+40*i) * time.Millisecond
		}
	}
	m.matcher = NewMatcher(DefaultMatchConfig(), src, src)
	m.check(true)
	return m
}

func (m *bookMachine) fatalf(format string, args ...any) {
	m.t.Helper()
	log := m.log[max(0, len(m.log)-30):]
	m.t.Fatalf("%s\nafter %d operations, the last:\n%s", fmt.Sprintf(format, args...), len(m.log), strings.Join(log, "\n"))
}

func (m *bookMachine) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// do runs operation op with the choices c makes, then checks the book.
func (m *bookMachine) do(op int, c chooser) {
	m.t.Helper()
	switch op {
	case opPut:
		o := machineOffer(c, m.issuer(c), m.newID(), uint64(1+c.choose("seq", 3)), m.now)
		if oneOf(c, "headless", false, true) {
			o.Header = nil
		}
		m.putOffer(o)
	case opReplace, opWithdraw:
		k := m.oldKey(c)
		o := machineOffer(c, k.issuer, k.id, m.seqOf(k)+1+uint64(c.choose("seq_step", 3)), m.now)
		o.Withdrawn = o.Withdrawn || op == opWithdraw
		m.putOffer(o)
	case opStale:
		k := m.oldKey(c)
		m.putOffer(machineOffer(c, k.issuer, k.id, m.seqOf(k)-min(m.seqOf(k), uint64(c.choose("seq_back", 3))), m.now))
	case opAdvance:
		m.now = m.now.Add(oneOf(c, "advance", time.Minute, 0, 10*time.Minute, time.Hour, 25*time.Hour))
		m.expire()
	case opBid:
		issuer := m.issuer(c)
		k := bookKey{issuer, "b" + strconv.Itoa(c.choose("bid_id", 3))}
		var seq uint64
		if e := m.bids.keys[k]; e != nil {
			seq = e.seq
		}
		seq = max(seq+uint64(c.choose("bid_seq", 3)), uint64(c.choose("bid_seq_new", 2))) // 0 a step: stale
		m.putBid(machineBid(c, issuer, k.id, seq, m.now))
	case opSnapshot:
		s := m.snapshot()
		if c.choose("hold", 2) == 1 {
			m.hold(s)
		}
		m.find(c, s)
	case opMatch:
		m.match(c)
	case opFind:
		m.find(c, m.snapshot())
	case opBulkPut:
		m.bulkPut(c)
	case opBulkChange:
		m.bulkChange(c)
	case opSigned:
		m.signedOffer(c)
	case opSignedBid:
		is := machineIssuers[c.choose("issuer", len(machineIssuers))]
		x := machineBid(c, is.id, "b"+strconv.Itoa(c.choose("bid_id", 3)), uint64(1+c.choose("bid_seq", 8)), m.now)
		if got, ok := signAndOpen(m, is.key, x); ok && DefaultLimits().ValidateBid(got, m.now) == nil {
			m.putBid(got)
		}
	}
	m.check(op == opSnapshot || op == opMatch || op == opFind || op == opAdvance)
}

func (m *bookMachine) issuer(c chooser) peer.ID {
	return machineIssuers[c.choose("issuer", len(machineIssuers))].id
}

func (m *bookMachine) newID() string {
	m.nextID++
	return "o" + strconv.Itoa(m.nextID)
}

// oldKey picks a key used before (the book may have forgotten or evicted
// it), or a new one if none was.
func (m *bookMachine) oldKey(c chooser) bookKey {
	if len(m.keys) == 0 {
		return bookKey{machineIssuers[0].id, m.newID()}
	}
	return m.keys[c.choose("key", len(m.keys))]
}

func (m *bookMachine) seqOf(k bookKey) uint64 {
	if e := m.offers.keys[k]; e != nil {
		return e.seq
	}
	return 0
}

// putOffer puts o in the book and the model and compares the outcomes.
func (m *bookMachine) putOffer(o *pb.Offer) {
	m.t.Helper()
	if o.GetHeader() == nil {
		err := m.book.PutOffer(o, m.now)
		m.logf("put offer with no header: %v", err)
		if !errors.Is(err, ErrInvalid) {
			m.fatalf("the book answered an offer with no header with %v", err)
		}
		return
	}
	k := keyOf(o.GetHeader())
	if !m.known[k] {
		m.known[k] = true
		m.keys = append(m.keys, k)
	}
	var want error
	var victim *bookKey
	if !indexable(o) {
		want = ErrInvalid
	} else {
		var msg *pb.Offer
		if !o.GetWithdrawn() {
			msg = o
		}
		victim, want = m.offers.put(o.GetHeader(), msg, m.now, m.book.horizon)
	}
	m.evicted = m.evicted[:0]
	err := m.book.PutOffer(o, m.now)
	m.logf("put offer %s seq %d withdrawn %v models %v %s expires %s: %v", shortKey(k), o.GetHeader().GetSeq(), o.GetWithdrawn(),
		modelsOf(o), o.GetRegion().GetCountry(), ms(o.GetHeader().GetExpiresUnixMs()), err)
	m.sameOutcome(err, want, victim, m.evicted)
}

// putBid puts x in the book and the model and compares the outcomes.
// The book names no evicted bid: check counts the eviction, and the keys
// compared after it say which went.
func (m *bookMachine) putBid(x *pb.Bid) {
	m.t.Helper()
	victim, want := m.bids.put(x.GetHeader(), x, m.now, m.book.horizon)
	_, before := m.book.Evicted()
	err := m.book.PutBid(x, m.now)
	m.logf("put bid %s seq %d: %v", shortKey(keyOf(x.GetHeader())), x.GetHeader().GetSeq(), err)
	var evicted []bookKey
	if _, after := m.book.Evicted(); after == before+1 && victim != nil {
		evicted = []bookKey{*victim}
	} else if after != before {
		evicted = make([]bookKey, after-before)
	}
	m.sameOutcome(err, want, victim, evicted)
}

func (m *bookMachine) sameOutcome(err, want error, victim *bookKey, evicted []bookKey) {
	m.t.Helper()
	if (err == nil) != (want == nil) || want != nil && !errors.Is(err, want) {
		m.fatalf("the book answered %v; the model %v", err, want)
	}
	if victim != nil && (len(evicted) != 1 || evicted[0] != *victim) || victim == nil && len(evicted) > 0 {
		m.fatalf("the book evicted %v; the model %v", evicted, victim)
	}
}

func (m *bookMachine) expire() {
	m.t.Helper()
	wantOffers, wantBids := m.offers.expire(m.now), m.bids.expire(m.now)
	gotOffers, gotBids := m.book.Expire(m.now)
	m.logf("expire at %s: %d offers, %d bids", m.now.Format(time.RFC3339), gotOffers, gotBids)
	if gotOffers != wantOffers || gotBids != wantBids {
		m.fatalf("Expire dropped %d offers and %d bids; the model %d and %d", gotOffers, gotBids, wantOffers, wantBids)
	}
}

// bulkPut puts up to 40 new offers, now and then up to 700, into one
// bucket (or, now and then, spread over the buckets): enough to cut a
// bucket's probes into chunks.
func (m *bookMachine) bulkPut(c chooser) {
	m.t.Helper()
	n := 1 + c.choose("bulk_n", 40)
	if c.choose("bulk_big", 4) == 3 {
		n = 1 + c.choose("bulk_n_big", 700)
	}
	n = m.bulk(n)
	spread := c.choose("spread", 4) == 3
	for i := range n {
		o := machineOffer(zeroChooser{}, machineIssuers[i%len(machineIssuers)].id, m.newID(), 1, m.now)
		o.PriceMicros = uint64(1+(i*7)%11) * 250_000
		if spread {
			o.Gpus[0].Model = machineModels[i%len(machineModels)]
			o.Region.Country = machineCountries[i%len(machineCountries)]
		}
		m.putOffer(o)
	}
}

// bulk takes n offers from the budget, or what is left of it.
func (m *bookMachine) bulk(n int) int {
	if m.bounded {
		n = min(n, m.budget)
		m.budget -= n
	}
	return n
}

// bulkChange replaces, withdraws or re-prices many of the keys used
// before, with no snapshot between: a bucket's dead entries come to
// outnumber its live ones and it rebuilds itself.
func (m *bookMachine) bulkChange(c chooser) {
	m.t.Helper()
	if len(m.keys) == 0 {
		return
	}
	n := m.bulk(1 + c.choose("change_n", 200))
	from := c.choose("change_from", len(m.keys))
	how := c.choose("change_how", 3)
	for i := range n {
		k := m.keys[(from+i)%len(m.keys)]
		o := machineOffer(zeroChooser{}, k.issuer, k.id, m.seqOf(k)+1, m.now)
		switch how {
		case 1:
			o.Withdrawn = true
		case 2:
			o.PriceMicros = uint64(1+(i*5)%13) * 250_000
		}
		m.putOffer(o)
	}
}

// signedOffer draws an offer, changes up to three bytes of its encoding,
// signs what still decodes as its issuer, opens it, validates it, and
// puts what passes: the path an offer from the network takes.
func (m *bookMachine) signedOffer(c chooser) {
	m.t.Helper()
	is := machineIssuers[c.choose("issuer", len(machineIssuers))]
	var id string
	if k := m.oldKey(c); c.choose("old_id", 2) == 1 {
		id = k.id
	} else {
		id = m.newID()
	}
	o := machineOffer(c, is.id, id, uint64(1+c.choose("seq", 8)), m.now)
	raw, err := proto.Marshal(o)
	if err != nil {
		m.fatalf("marshal: %v", err)
	}
	for range c.choose("flips", 4) {
		raw[c.choose("at", len(raw))] = byte(c.choose("byte", 256))
	}
	o = new(pb.Offer)
	if Unmarshal(raw, o) != nil || o.Header == nil {
		return
	}
	o.Header.Issuer = []byte(is.id)
	if got, ok := signAndOpen(m, is.key, o); ok && DefaultLimits().ValidateOffer(got, m.now) == nil {
		m.putOffer(got)
	}
}

// signAndOpen seals x with key and opens it again, as a receiving node
// does: ok false if the envelope is too large to send.
func signAndOpen[M Message](m *bookMachine, key crypto.PrivKey, x M) (M, bool) {
	m.t.Helper()
	env, err := Sign(key, x)
	if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalid) {
		return x, false
	}
	if err != nil {
		m.fatalf("sign: %v", err)
	}
	got, err := Open[M](env)
	if err != nil {
		m.fatalf("open what was signed: %v", err)
	}
	return got, true
}

// shortKey names k in a log: its issuer by its index, or the last bytes
// of its ID.
func shortKey(k bookKey) string {
	for i, is := range machineIssuers {
		if is.id == k.issuer {
			return "p" + strconv.Itoa(i) + "/" + k.id
		}
	}
	return fmt.Sprintf("%x/%s", []byte(k.issuer[max(0, len(k.issuer)-2):]), k.id)
}

func modelsOf(o *pb.Offer) []string {
	var out []string
	for _, g := range o.GetGpus() {
		out = append(out, g.GetModel())
	}
	return out
}

// TestPropBookIsItsModel runs random sequences of the machine's
// operations on a book, bounded or not, and compares it with the model
// after every step.
func TestPropBookIsItsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := rapidChooser{t}
		m := newBookMachine(t, c)
		actions := map[string]func(*rapid.T){}
		for op, name := range opNames {
			actions[name] = func(t *rapid.T) { m.do(op, rapidChooser{t}) }
		}
		t.Repeat(actions)
	})
}
