package market

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"
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

// chooser picks the machine's next choice: a number in [0, n).
type chooser interface {
	choose(label string, n int) int
}

// failer is what the machine reports to: *testing.T or *rapid.T.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) choose(label string, n int) int {
	if n <= 1 {
		return 0
	}
	return rapid.IntRange(0, n-1).Draw(c.t, label)
}

// oneOf is usual for a choice of 0 to 3, else one of others.
func oneOf[V any](c chooser, label string, usual V, others ...V) V {
	if i := c.choose(label, 4+len(others)); i >= 4 {
		return others[i-4]
	}
	return usual
}

// machineIssuer is an issuer with its key, for the signed path, and the
// rank the book's limits give it.
type machineIssuer struct {
	key  crypto.PrivKey
	id   peer.ID
	rank int
}

// machineIssuers: three strangers, two known, one own; the fifth signs
// with secp256k1, which Open reads through libp2p's general path.
var machineIssuers = func() []machineIssuer {
	var out []machineIssuer
	for i, rank := range []int{RankUnknown, RankUnknown, RankUnknown, RankKnown, RankKnown, RankOwn} {
		r := &seededReader{b: byte(40 + i)}
		var key crypto.PrivKey
		var err error
		if i == 4 {
			key, _, err = crypto.GenerateSecp256k1Key(r)
		} else {
			key, _, err = crypto.GenerateEd25519Key(r)
		}
		if err != nil {
			panic(err)
		}
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			panic(err)
		}
		out = append(out, machineIssuer{key, id, rank})
	}
	return out
}()

func machineRank(p peer.ID) int {
	for _, is := range machineIssuers {
		if is.id == p {
			return is.rank
		}
	}
	return RankUnknown
}

// Small domains, so offers share buckets and tie: models in several
// spellings of one catalog model, a family name, one the catalog lacks.
var (
	machineModels    = []string{"H100 SXM", "A100", "L40S", "h100-sxm5", "H100", "Foo 9"}
	machineCountries = []string{"DE", "FR", "US"}
	machineClasses   = []string{"training", "inference", "m-a", "m-b", "m-c", "m-d", "m-e", "m-f", "m-g", "m-h", "m-i", "m-j"}
	machineFilters   = []string{"", "H100", "H100 SXM", "L40S", "Foo 9", "A100"}
)

// machineOffer draws an offer's content; 0 everywhere is a plain offer
// the book takes. The rest reach every shape the index and its probes
// tell apart: several groups and models, sizes not whole GiB, free and
// missing tiers, unknown workload classes, steps past a probe's byte.
func machineOffer(c chooser, issuer peer.ID, id string, seq uint64, now time.Time) *pb.Offer {
	o := mtOffer(issuer, id)
	o.Header.Seq = seq
	o.Header.CreatedUnixMs = now.Add(-oneOf(c, "age", time.Minute, 0, 3*time.Hour)).UnixMilli()
	o.Header.ExpiresUnixMs = now.Add(oneOf(c, "ttl", 2*time.Hour, 10*time.Minute, 30*time.Minute, -time.Minute, 23*time.Hour)).UnixMilli()
	o.Withdrawn = oneOf(c, "withdrawn", false, true)
	o.Gpus = nil
	for i := range 1 + oneOf(c, "groups", 0, 1, 2) {
		o.Gpus = append(o.Gpus, &pb.GPUGroup{
			Model:             machineModels[c.choose("model"+strconv.Itoa(i), len(machineModels))],
			Count:             oneOf[uint32](c, "count", 8, 1, 2, 4, 0, 1<<17),
			VramBytes:         oneOf[uint64](c, "vram", 80<<30, 24<<30, 40e9, 79e9, 21<<29, 1<<50),
			ComputeCapability: oneOf[uint32](c, "cc", 90, 80, 300),
			Interconnect:      oneOf(c, "link", "sxm", "", "nvlink"),
		})
	}
	o.Host.CpuCores = oneOf[uint32](c, "cores", 64, 8, 1<<20)
	o.Host.RamBytes = oneOf[uint64](c, "ram", 512<<30, 128e9, 1<<62)
	o.Host.DiskBytes = oneOf[uint64](c, "disk", 2000<<30, 0)
	o.Host.UpBitsPerSecond = oneOf[uint64](c, "up", 1e10, 15e8+1)
	o.HostWhole = oneOf(c, "host_whole", false, true)
	o.GpusWhole = oneOf(c, "gpus_whole", false, true)
	o.GpuStep = oneOf[uint32](c, "step", 0, 2, 300)
	o.Region.Country = machineCountries[c.choose("country", len(machineCountries))]
	o.Currency = oneOf(c, "currency", "USD", "EUR")
	o.PriceMicros = uint64(1+c.choose("price", 6)) * 500_000
	if oneOf(c, "free", false, true) {
		o.PriceMicros = 0
	}
	o.TierPrices = nil
	for _, tier := range propTiers {
		if c.choose("override", 2) == 1 {
			o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: tier, MicrosPerGpuHour: uint64(c.choose("tier_price", 6)) * 500_000}) // 0: free
		}
	}
	o.Tiers = oneOf(c, "tiers", propTiers, []pb.Tier{pb.Tier_TIER_GOLD}, []pb.Tier{pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE},
		[]pb.Tier{pb.Tier_TIER_BRONZE, pb.Tier_TIER_BRONZE}, nil, []pb.Tier{pb.Tier_TIER_UNSPECIFIED, pb.Tier(7)})
	o.MinDurationSeconds = oneOf[uint64](c, "min_h", 1, 2, 1<<40) * 3600
	o.MaxDurationSeconds = oneOf[uint64](c, "max_h", 48, 4, 1<<40) * 3600
	o.WorkloadClasses = nil
	for range oneOf(c, "n_classes", 0, 1, 2) {
		o.WorkloadClasses = append(o.WorkloadClasses, machineClasses[c.choose("class", len(machineClasses))])
	}
	o.ImageAllow = oneOf(c, "allow", nil, []string{"docker.io/"})
	o.ImageDeny = oneOf(c, "deny", nil, []string{"docker.io/library/"})
	switch c.choose("windows", 3) {
	case 1:
		start := now.Add(time.Duration(c.choose("w_start_h", 24)-4) * time.Hour)
		o.Windows = []*pb.Interval{{StartUnixMs: start.UnixMilli(), EndUnixMs: start.Add(time.Duration(1+c.choose("w_len_h", 10)) * time.Hour).UnixMilli(),
			FloorMicros: oneOf[uint64](c, "floor", 0, 2_500_000)}}
	case 2:
		from := uint32(c.choose("wk_start_h", 7*24-1)) * 60
		o.Weekly = []*pb.WeeklyWindow{{StartMinute: from, EndMinute: from + 60, FloorMicros: oneOf[uint64](c, "wk_floor", 0, 2_000_000)}}
	}
	return o
}

// machineBid draws a bid, to put in the book or to match.
func machineBid(c chooser, issuer peer.ID, id string, seq uint64, now time.Time) *pb.Bid {
	b := mtBid()
	b.Header.Issuer, b.Header.Id, b.Header.Seq = []byte(issuer), id, seq
	b.Header.CreatedUnixMs = now.Add(-time.Minute).UnixMilli()
	b.Header.ExpiresUnixMs = now.Add(oneOf(c, "bid_ttl", time.Hour, 10*time.Minute, -time.Minute)).UnixMilli()
	b.Gpu.Models = oneOf(c, "bid_models", nil, []string{"H100"}, []string{"A100", "L40S"}, []string{"Foo 9"}, []string{"H100 SXM"})
	b.Gpu.MinVramBytes = oneOf[uint64](c, "min_vram", 0, 40<<30, 80<<30, 40e9)
	b.Gpu.MinComputeCapability = oneOf[uint32](c, "min_cc", 0, 80, 90)
	b.Gpu.Count = uint32(1 + c.choose("bid_count", 8))
	b.Gpu.MinPerProvider = uint32(c.choose("min_per_provider", int(b.Gpu.Count)+1))
	b.Tier = propTiers[c.choose("bid_tier", 3)]
	b.PreemptionOk = oneOf(c, "preemption_ok", true, false)
	b.Currency = oneOf(c, "bid_currency", "USD", "EUR")
	b.MaxPriceMicros = oneOf[uint64](c, "max_price", 3_000_000, 1_000_000, 2_000_000, 0)
	b.DurationSeconds = oneOf[uint64](c, "hours", 1, 3, 30) * 3600
	b.EarliestStartUnixMs = now.Add(time.Duration(c.choose("earliest_h", 6)-1) * time.Hour).UnixMilli()
	b.HostMin.CpuCores = oneOf[uint32](c, "min_cores", 0, 16)
	b.HostMin.RamBytes = oneOf[uint64](c, "min_ram", 128<<30, 0, 128e9)
	b.RegionsAllowed = oneOf(c, "allowed", nil, []string{"DE"}, []string{"FR", "US"})
	b.WorkloadClass = oneOf(c, "bid_class", "training", "", "inference", "m-j")
	b.Image = oneOf(c, "image", "docker.io/pytorch/pytorch", "docker.io/library/ubuntu")
	return b
}

// modelEntry is what the model holds for a key: what the book must
// remember of it, when it arrived (for eviction), and its message (the
// zero value for a tombstone).
type modelEntry[M comparable] struct {
	stamp
	arrival int
	msg     M
}

// modelSide is the model of one kind of the book's keys. It counts what
// it holds as it changes, and lists the keys it changed for the next
// check.
type modelSide[M comparable] struct {
	max      int
	keys     map[bookKey]*modelEntry[M]
	arrivals int
	nLive    int
	held     [ranks]int
	touched  []bookKey
	changed  func(old, new M) // told of each message that comes or goes
	rank     Ranker           // nil: all RankUnknown
}

// set stores e for k (nil: forgets k).
func (s *modelSide[M]) set(k bookKey, e *modelEntry[M]) {
	var zero M
	oldMsg, newMsg := zero, zero
	if old := s.keys[k]; old != nil {
		oldMsg = old.msg
		s.held[old.rank]--
	}
	if e != nil {
		newMsg = e.msg
		s.held[e.rank]++
		s.keys[k] = e
	} else {
		delete(s.keys, k)
	}
	if oldMsg != zero {
		s.nLive--
	}
	if newMsg != zero {
		s.nLive++
	}
	if oldMsg != newMsg && s.changed != nil {
		s.changed(oldMsg, newMsg)
	}
	s.touched = append(s.touched, k)
}

// put applies the book's rules to a message of header h and content msg
// (zero: a withdrawal) at now: the error the book must give, and the key
// a full book must evict first.
func (s *modelSide[M]) put(h *pb.Header, msg M, now time.Time, horizon int64) (victim *bookKey, err error) {
	k := keyOf(h)
	old := s.keys[k]
	switch {
	case old != nil && h.GetSeq() <= old.seq:
		return nil, ErrStale
	case h.GetExpiresUnixMs() <= now.UnixMilli():
		return nil, ErrExpired
	}
	e := &modelEntry[M]{stamp: stamp{seq: h.GetSeq(), expires: h.GetExpiresUnixMs(), forget: max(h.GetExpiresUnixMs(), h.GetCreatedUnixMs()+horizon)}, msg: msg}
	if old != nil {
		e.rank, e.arrival = old.rank, old.arrival
	} else {
		if s.rank != nil {
			e.rank = int8(s.rank(k.issuer))
		}
		if s.max > 0 && len(s.keys) >= s.max {
			// A full book evicts the last arrival of the lowest rank it
			// holds, for a key that ranks above it.
			low := int8(0)
			for low < ranks-1 && s.held[low] == 0 {
				low++
			}
			if e.rank <= low {
				return nil, ErrBookFull
			}
			var last *modelEntry[M]
			for vk, x := range s.keys {
				if x.rank == low && (last == nil || x.arrival > last.arrival) {
					last, victim = x, &vk
				}
			}
			s.set(*victim, nil)
		}
		s.arrivals++
		e.arrival = s.arrivals
	}
	s.set(k, e)
	return victim, nil
}

// expire turns what expired at now into tombstones and forgets the
// tombstones past their time (not those it made): how many it expired.
func (s *modelSide[M]) expire(now time.Time) int {
	var zero M
	n, nowMs := 0, now.UnixMilli()
	for k, e := range s.keys {
		switch {
		case e.msg != zero && e.expires <= nowMs:
			s.set(k, &modelEntry[M]{stamp: e.stamp, arrival: e.arrival})
			n++
		case e.msg == zero && e.forget <= nowMs:
			s.set(k, nil)
		}
	}
	return n
}

// live lists the live messages in key order.
func (s *modelSide[M]) live() []M {
	var zero M
	ks := slices.SortedFunc(maps.Keys(s.keys), compareKeys)
	out := make([]M, 0, len(ks))
	for _, k := range ks {
		if m := s.keys[k].msg; m != zero {
			out = append(out, m)
		}
	}
	return out
}

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

// indexable says whether the book indexes o, or refuses it as invalid.
func indexable(o *pb.Offer) bool {
	if o.GetWithdrawn() {
		return true
	}
	return len(o.GetGpus()) > 0 && slices.ContainsFunc(o.GetTiers(), func(t pb.Tier) bool { return t >= pb.Tier_TIER_GOLD && t <= pb.Tier_TIER_BRONZE })
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

// zeroChooser always chooses the usual.
type zeroChooser struct{}

func (zeroChooser) choose(string, int) int { return 0 }

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

// check compares what the book holds with the model without a snapshot
// (one would publish the buckets and hide what builds up between
// snapshots): the stamp and message of every key the step changed (of
// every key, where all), the counts, and every bucket's live count and
// backlog.
func (m *bookMachine) check(all bool) {
	m.t.Helper()
	b := m.book
	b.mu.Lock()
	defer b.mu.Unlock()
	sameKeys(m, "offer", &b.offers, &m.offers, all, func(e *offerEntry) *pb.Offer { return e.offer })
	sameKeys(m, "bid", &b.bids, &m.bids, all, func(e *bidEntry) *pb.Bid { return e.bid })
	if b.nOffers != m.offers.nLive || b.nBids != m.bids.nLive {
		m.fatalf("the book counts %d live offers and %d bids; the model %d and %d", b.nOffers, b.nBids, m.offers.nLive, m.bids.nLive)
	}
	for _, r := range []struct {
		kind string
		room *room
		held [ranks]int
	}{{"offer", &b.offerRoom, m.offers.held}, {"bid", &b.bidRoom, m.bids.held}} {
		if r.room.held != r.held {
			m.fatalf("the book's %s room holds %v keys by rank; the model %v", r.kind, r.room.held, r.held)
		}
		if n := r.room.total(); r.room.max > 0 && n > r.room.max {
			m.fatalf("the book holds %d %s keys, over its limit %d", n, r.kind, r.room.max)
		}
	}
	if len(b.buckets) != len(b.order) {
		m.fatalf("%d buckets by key, %d in order", len(b.buckets), len(b.order))
	}
	n := 0
	for i, bk := range b.order {
		if b.buckets[bk.key] != bk || i > 0 && compareBuckets(b.order[i-1].key, bk.key) >= 0 {
			m.fatalf("bucket %v out of place", bk.key)
		}
		if bk.live != m.buckets[bk.key] {
			m.fatalf("bucket %v counts %d live; the model %d", bk.key, bk.live, m.buckets[bk.key])
		}
		if len(bk.removed) > bk.live+32 {
			m.fatalf("bucket %v holds %d removed for %d live", bk.key, len(bk.removed), bk.live)
		}
		if bk.live > 0 {
			n++
		}
	}
	if n != len(m.buckets) {
		m.fatalf("%d buckets hold offers; the model %d", n, len(m.buckets))
	}
}

// sameKeys compares the book's entries of one kind with the model's: of
// the keys the model touched since the last check, or of all.
func sameKeys[V comparable, M comparable](m *bookMachine, kind string, s *shardSet[V], model *modelSide[M], all bool, msg func(V) M) {
	m.t.Helper()
	var zero V
	var zeroMsg M
	same := func(k bookKey, e V) {
		want := model.keys[k]
		switch {
		case e == zero && want == nil:
		case e == zero || want == nil:
			m.fatalf("%s %s: the book remembers it %v; the model %v", kind, shortKey(k), e != zero, want != nil)
		default:
			if st := any(e).(interface{ stampOf() *stamp }).stampOf(); *st != want.stamp || msg(e) != want.msg {
				m.fatalf("%s %s: the book holds %+v (live %v); the model %+v (live %v)", kind, shortKey(k), *st, msg(e) != zeroMsg, want.stamp, want.msg != zeroMsg)
			}
		}
	}
	for _, k := range model.touched {
		same(k, s.get(k))
	}
	model.touched = model.touched[:0]
	if !all {
		return
	}
	n := 0
	for _, sh := range s {
		if sh != nil {
			for k, e := range sh.m {
				n++
				same(k, e)
			}
		}
	}
	if n != len(model.keys) {
		m.fatalf("the book remembers %d %s keys; the model %d", n, kind, len(model.keys))
	}
}

func compareBuckets(a, b bucketKey) int {
	return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.country, b.country))
}

// countBuckets counts o by n in each bucket it belongs in: one per
// canonical model of its groups, in its country.
func (m *bookMachine) countBuckets(o *pb.Offer, n int) {
	for _, model := range m.canonicalModels(o) {
		k := bucketKey{model, o.GetRegion().GetCountry()}
		if m.buckets[k] += n; m.buckets[k] == 0 {
			delete(m.buckets, k)
		}
	}
}

// canonicalModels lists the canonical models of o's groups, each once.
func (m *bookMachine) canonicalModels(o *pb.Offer) []string {
	if ms, ok := m.canonical[o]; ok {
		return ms
	}
	var out []string
	for _, g := range o.GetGpus() {
		if model := gpus.Default().Canonical(g.GetModel()); !slices.Contains(out, model) {
			out = append(out, model)
		}
	}
	m.canonical[o] = out
	return out
}

// snapshot takes a snapshot and checks it whole against the model: its
// offers and bids, every index bucket, every probe chunk; and that the
// snapshot held from before still shows what it showed.
func (m *bookMachine) snapshot() *Snapshot {
	m.t.Helper()
	s := m.book.Snapshot()
	m.logf("snapshot")
	live := m.offers.live()
	if s.Len() != len(live) || !slices.Equal(s.Offers(), live) {
		m.fatalf("the snapshot lists %d offers; the model %d", s.Len(), len(live))
	}
	if bids := m.bids.live(); s.NumBids() != len(bids) || !slices.Equal(s.Bids(), bids) {
		m.fatalf("the snapshot lists %d bids; the model %d", s.NumBids(), len(bids))
	}
	for k, e := range m.offers.keys {
		if o, ok := s.Offer(k.issuer, k.id); ok != (e.msg != nil) || o != e.msg {
			m.fatalf("snapshot's offer %s: %v; the model's %v", shortKey(k), o, e.msg)
		}
	}
	for k, e := range m.bids.keys {
		if x, ok := s.Bid(k.issuer, k.id); ok != (e.msg != nil) || x != e.msg {
			m.fatalf("snapshot's bid %s: %v; the model's %v", shortKey(k), x, e.msg)
		}
	}
	m.checkIndex(s, live)
	if m.held != nil {
		if !slices.Equal(m.held.Offers(), m.heldAt) || !slices.EqualFunc(m.held.views, m.heldViews, sameView) {
			m.fatalf("a snapshot changed after it was taken")
		}
	}
	return s
}

// hold keeps s and a copy of what it shows, to check later that it
// still shows that.
func (m *bookMachine) hold(s *Snapshot) {
	m.held, m.heldAt, m.heldViews = s, m.offers.live(), nil
	for _, v := range s.views {
		c := &bucketView{model: v.model, country: v.country}
		for t := range v.tiers {
			c.tiers[t] = slices.Clone(v.tiers[t])
		}
		for _, ch := range v.chunks {
			c.chunks = append(c.chunks, &probeChunk{probes: slices.Clone(ch.probes)})
		}
		m.heldViews = append(m.heldViews, c)
	}
}

// sameView says whether v shows what its copy c showed.
func sameView(v, c *bucketView) bool {
	if v.model != c.model || v.country != c.country || len(v.chunks) != len(c.chunks) {
		return false
	}
	for t := range v.tiers {
		if !slices.Equal(v.tiers[t], c.tiers[t]) {
			return false
		}
	}
	for i, ch := range v.chunks {
		if !slices.Equal(ch.probes, c.chunks[i].probes) {
			return false
		}
	}
	return true
}

// checkIndex checks every bucket view of s against the model's live
// offers (live, in key order): one view per bucket that holds offers,
// counting them; each tier's list in order of price and key, each item
// a live offer of the bucket's model and country, in that tier, at its
// price, and as many items as the offers have (bucket, tier) pairs; the
// probe chunks in key order, within their size, one probe for each
// offer of the bucket.
func (m *bookMachine) checkIndex(s *Snapshot, live []*pb.Offer) {
	m.t.Helper()
	items := 0
	for _, o := range live {
		tiers := 0
		for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
			if slices.Contains(o.GetTiers(), t) {
				tiers++
			}
		}
		items += tiers * len(m.canonicalModels(o))
	}
	liveOffer := func(k bookKey) *pb.Offer {
		if e := m.offers.keys[k]; e != nil {
			return e.msg
		}
		return nil
	}
	if len(s.views) != len(m.buckets) {
		m.fatalf("%d views; the model has %d buckets", len(s.views), len(m.buckets))
	}
	got := 0
	for i, v := range s.views {
		bk := bucketKey{v.model, v.country}
		if i > 0 && compareBuckets(bucketKey{s.views[i-1].model, s.views[i-1].country}, bk) >= 0 {
			m.fatalf("views out of order at %v", bk)
		}
		if v.n != m.buckets[bk] {
			m.fatalf("view %v counts %d offers; the model %d", bk, v.n, m.buckets[bk])
		}
		for t, list := range v.tiers {
			for j, it := range list {
				o := liveOffer(it.e.key)
				if o == nil || it.e.offer != o || !slices.Contains(o.GetTiers(), pb.Tier(t)) || o.GetRegion().GetCountry() != v.country ||
					!slices.Contains(m.canonicalModels(o), v.model) || it.price != TierPrice(o, pb.Tier(t)) {
					m.fatalf("view %v tier %d lists %s at %d, which the model does not", bk, t, shortKey(it.e.key), it.price)
				}
				if j > 0 && compareItems(list[j-1], it) >= 0 {
					m.fatalf("view %v tier %d is out of order at %d", bk, t, j)
				}
			}
			got += len(list)
		}
		n := 0
		var last *probe
		for j, c := range v.chunks {
			if len(c.probes) == 0 || len(c.probes) > 2*chunkProbes {
				m.fatalf("view %v chunk %d holds %d probes", bk, j, len(c.probes))
			}
			for p := range c.probes {
				r := &c.probes[p]
				if last != nil && compareProbes(*last, *r) >= 0 || r.e.offer != liveOffer(r.e.key) {
					m.fatalf("view %v chunk %d probe %d (%s) out of order or not live", bk, j, p, shortKey(r.e.key))
				}
				last = r
			}
			n += len(c.probes)
		}
		if n != v.n {
			m.fatalf("view %v holds %d probes for %d offers", bk, n, v.n)
		}
		if !slices.IsSortedFunc(v.unsure, compareUnsure) {
			m.fatalf("view %v: unsure probes out of order", bk)
		}
	}
	if got != items {
		m.fatalf("the views list %d (bucket, offer, tier) items; the model's offers have %d", got, items)
	}
}

// find lists offers through the snapshot's index with a filter c draws
// and compares the listing with a scan of the model.
func (m *bookMachine) find(c chooser, s *Snapshot) {
	m.t.Helper()
	f := OfferFilter{
		GPUModel:       machineFilters[c.choose("f_model", len(machineFilters))],
		MinVRAMBytes:   oneOf[uint64](c, "f_vram", 0, 40<<30, 80<<30),
		Country:        oneOf(c, "f_country", "", "DE", "US"),
		MaxPriceMicros: oneOf[uint64](c, "f_price", 0, 1_000_000, 2_000_000),
		Tier:           oneOf(c, "f_tier", pb.Tier_TIER_UNSPECIFIED, pb.Tier_TIER_GOLD, pb.Tier_TIER_BRONZE),
		SortBy:         oneOf(c, "f_sort", "price", "vram", "expiry", ""),
	}
	got, want := s.FindOffers(f), findScan(m.offers.live(), f)
	m.logf("find %+v: %d", f, len(got))
	if !slices.Equal(got, want) {
		m.fatalf("FindOffers(%+v) lists %d offers; the scan %d:\n%s\n%s", f, len(got), len(want), offerIDs(got), offerIDs(want))
	}
}

func offerIDs(os []*pb.Offer) string {
	var ids []string
	for _, o := range os {
		ids = append(ids, shortKey(keyOf(o.GetHeader())))
	}
	return strings.Join(ids, " ")
}

// findScan is FindOffers as a scan of every offer: an offer passes if a
// group's model is one the filter's names, in the country, in the tier
// (or listed at its cheapest tier), at most the price, with a group of
// the model of at least the VRAM.
func findScan(offers []*pb.Offer, f OfferFilter) []*pb.Offer {
	type hit struct {
		o           *pb.Offer
		price, vram uint64
	}
	var models []string
	if f.GPUModel != "" {
		models = gpus.Default().Expand([]string{f.GPUModel})
	}
	cat := gpus.Default()
	var hits []hit
	for _, o := range offers {
		if f.Country != "" && o.GetRegion().GetCountry() != f.Country {
			continue
		}
		var vram uint64
		has := false
		for _, g := range o.GetGpus() {
			model := cat.Canonical(g.GetModel())
			if models == nil || slices.Contains(models, model) {
				has, vram = true, max(vram, cat.MarketedBytes(model, g.GetVramBytes()))
			}
		}
		tier := f.Tier
		if tier == pb.Tier_TIER_UNSPECIFIED {
			for t := pb.Tier_TIER_GOLD; t <= pb.Tier_TIER_BRONZE; t++ {
				if p := TierPrice(o, t); slices.Contains(o.GetTiers(), t) && p != 0 && (tier == pb.Tier_TIER_UNSPECIFIED || p < TierPrice(o, tier)) {
					tier = t
				}
			}
		}
		price := TierPrice(o, tier)
		if !has || tier < pb.Tier_TIER_GOLD || tier > pb.Tier_TIER_BRONZE || !slices.Contains(o.GetTiers(), tier) || f.MaxPriceMicros > 0 && price > f.MaxPriceMicros || vram < f.MinVRAMBytes {
			continue
		}
		hits = append(hits, hit{o, price, vram})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		var c int
		switch f.SortBy {
		case "vram":
			c = cmp.Compare(b.vram, a.vram)
		case "expiry":
			c = cmp.Compare(a.o.GetHeader().GetExpiresUnixMs(), b.o.GetHeader().GetExpiresUnixMs())
		default:
			c = cmp.Compare(a.price, b.price)
		}
		return cmp.Or(c, compareKeys(keyOf(a.o.GetHeader()), keyOf(b.o.GetHeader())))
	})
	out := make([]*pb.Offer, len(hits))
	for i, h := range hits {
		out[i] = h.o
	}
	return out
}

// match matches a bid c draws through the snapshot's index and compares
// the candidates with a scan of the model's offers, each checked alone
// with Feasible; and Explain, which reads the probes, with a scan of the
// snapshot's offers.
func (m *bookMachine) match(c chooser) {
	m.t.Helper()
	s := m.snapshot()
	bid := machineBid(c, machineIssuers[0].id, "match", 1, m.now)
	now := m.now.Add(oneOf(c, "match_later", 0, 20*time.Minute, 3*time.Hour))
	k := c.choose("k", 6)
	res := m.matcher.Match(s, bid, now, k)
	m.logf("match k %d: %s", k, candidateIDs(res.Candidates))
	if got, want := candidateIDs(res.Candidates), candidateIDs(m.matchScan(bid, now, k)); got != want {
		m.fatalf("Match: %q; the scan of the model: %q", got, want)
	}
	if ex, want := m.matcher.Explain(s, bid, now), scanExplain(m.matcher, s, bid, now); !equalExplanations(ex, want) {
		m.fatalf("Explain:\n%+v\nthe scan's:\n%+v", ex, want)
	}
}

// matchScan is Match as a scan of the model's live offers, each checked
// alone as Feasible checks it (with the bid's plan made once).
func (m *bookMachine) matchScan(bid *pb.Bid, now time.Time, k int) []Candidate {
	var all []Candidate
	p := m.matcher.plan(bid, now)
	for _, o := range m.offers.live() {
		f := factsOf(o)
		if c, failed := m.matcher.evaluate(new(evalCtx), o, &f, Issuer(o), p, false); failed < 0 {
			all = append(all, c)
		}
	}
	slices.SortFunc(all, func(a, b Candidate) int { return compareCandidates(&a, &b) })
	if !p.split { // a provider once: its best offer
		seen := map[peer.ID]bool{}
		all = slices.DeleteFunc(all, func(c Candidate) bool {
			dup := seen[c.Issuer]
			seen[c.Issuer] = true
			return dup
		})
	}
	if k > 0 && len(all) > k {
		all = all[:k]
	}
	return all
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
