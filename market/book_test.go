package market

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// bkOffer is mtOffer with a seq and an expiry in minutes after mtNow.
func bkOffer(issuer peer.ID, id string, seq uint64, expiresMin int) *pb.Offer {
	o := mtOffer(issuer, id)
	o.Header.Seq = seq
	o.Header.ExpiresUnixMs = mtNow.Add(time.Duration(expiresMin) * time.Minute).UnixMilli()
	return o
}

func withdrawal(issuer peer.ID, id string, seq uint64) *pb.Offer {
	o := bkOffer(issuer, id, seq, 30)
	o.Withdrawn = true
	return o
}

// remembered counts the keys a book holds, live or tombstones.
func remembered(b *Book) (offers, bids int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.offers {
		if b.offers[i] != nil {
			offers += len(b.offers[i].m)
		}
		if b.bids[i] != nil {
			bids += len(b.bids[i].m)
		}
	}
	return offers, bids
}

func seqOf(t *testing.T, s *Snapshot, issuer peer.ID, id string) uint64 {
	t.Helper()
	o, ok := s.Offer(issuer, id)
	if !ok {
		return 0
	}
	return o.Header.Seq
}

func TestBookReplacesOnlyWithHigherSeq(t *testing.T) {
	b, p := NewBook(), mtPeers[0]
	steps := []struct {
		seq     uint64
		wantErr error
		wantSeq uint64
	}{
		{2, nil, 2},
		{1, ErrStale, 2},
		{2, ErrStale, 2},
		{3, nil, 3},
		{10, nil, 10},
		{9, ErrStale, 10},
	}
	for _, st := range steps {
		err := b.PutOffer(bkOffer(p, "a", st.seq, 30), mtNow)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Fatalf("seq %d: err %v, want %v", st.seq, err, st.wantErr)
		}
		if got := seqOf(t, b.Snapshot(), p, "a"); got != st.wantSeq {
			t.Fatalf("after seq %d the book holds seq %d, want %d", st.seq, got, st.wantSeq)
		}
	}
	// Another id of the same issuer, and the same id of another issuer, are
	// other keys.
	if err := b.PutOffer(bkOffer(p, "b", 1, 30), mtNow); err != nil {
		t.Fatal(err)
	}
	if err := b.PutOffer(bkOffer(mtPeers[1], "a", 1, 30), mtNow); err != nil {
		t.Fatal(err)
	}
	if n := b.Snapshot().Len(); n != 3 {
		t.Errorf("%d offers, want 3", n)
	}
	if err := b.PutOffer(&pb.Offer{}, mtNow); !errors.Is(err, ErrInvalid) {
		t.Errorf("an offer without a header: %v", err)
	}
}

func TestBookWithdrawal(t *testing.T) {
	b, p := NewBook(), mtPeers[0]
	if err := b.PutOffer(bkOffer(p, "a", 1, 30), mtNow); err != nil {
		t.Fatal(err)
	}
	if err := b.PutOffer(withdrawal(p, "a", 2), mtNow); err != nil {
		t.Fatal(err)
	}
	s := b.Snapshot()
	if _, ok := s.Offer(p, "a"); ok || s.Len() != 0 || len(s.FindOffers(OfferFilter{})) != 0 {
		t.Fatalf("withdrawn offer still listed: len %d", s.Len())
	}
	if err := b.PutOffer(bkOffer(p, "a", 1, 30), mtNow); !errors.Is(err, ErrStale) {
		t.Errorf("a replay of the withdrawn offer: %v, want ErrStale", err)
	}
	if err := b.PutOffer(withdrawal(p, "a", 2), mtNow); !errors.Is(err, ErrStale) {
		t.Errorf("the withdrawal again: %v, want ErrStale", err)
	}
	if err := b.PutOffer(bkOffer(p, "a", 3, 30), mtNow); err != nil {
		t.Errorf("a newer offer after the withdrawal: %v", err)
	}
	if got := seqOf(t, b.Snapshot(), p, "a"); got != 3 {
		t.Errorf("seq %d, want 3", got)
	}
	// A withdrawal of an offer never seen is remembered too.
	if err := b.PutOffer(withdrawal(p, "new", 5), mtNow); err != nil {
		t.Fatal(err)
	}
	if err := b.PutOffer(bkOffer(p, "new", 4, 30), mtNow); !errors.Is(err, ErrStale) {
		t.Errorf("an offer older than its withdrawal: %v", err)
	}
}

func TestBookExpiry(t *testing.T) {
	b, p := NewBook(), mtPeers[0]
	if err := b.PutOffer(bkOffer(p, "old", 1, 0), mtNow); !errors.Is(err, ErrExpired) {
		t.Errorf("an offer expiring at now: %v, want ErrExpired", err)
	}
	for i, exp := range []int{10, 20, 30} {
		if err := b.PutOffer(bkOffer(p, strconv.Itoa(i), 1, exp), mtNow); err != nil {
			t.Fatal(err)
		}
	}
	bid := mtBid()
	bid.Header.ExpiresUnixMs = mtNow.Add(15 * time.Minute).UnixMilli()
	if err := b.PutBid(bid, mtNow); err != nil {
		t.Fatal(err)
	}
	if o, x := b.Expire(mtNow.Add(5 * time.Minute)); o != 0 || x != 0 {
		t.Errorf("nothing due yet, Expire dropped %d offers, %d bids", o, x)
	}
	if o, x := b.Expire(mtNow.Add(20 * time.Minute)); o != 2 || x != 1 {
		t.Errorf("at +20m Expire dropped %d offers, %d bids; want 2 and 1", o, x)
	}
	s := b.Snapshot()
	if s.Len() != 1 || s.NumBids() != 0 || seqOf(t, s, p, "2") != 1 {
		t.Errorf("after expiry: %d offers, %d bids", s.Len(), s.NumBids())
	}
	// The expired keys are remembered: a replay fails as stale.
	if err := b.PutOffer(bkOffer(p, "0", 1, 60), mtNow.Add(20*time.Minute)); !errors.Is(err, ErrStale) {
		t.Errorf("replay of an expired offer: %v", err)
	}
	if n, _ := remembered(b); n != 3 {
		t.Errorf("book remembers %d offer keys, want 3", n)
	}
	// One horizon after creation, the tombstones go and memory is bounded.
	later := mtNow.Add(DefaultLimits().MaxHorizon + time.Hour)
	b.Expire(later)
	b.Expire(later)
	if n, x := remembered(b); n != 0 || x != 0 {
		t.Errorf("book still remembers %d offers, %d bids one horizon later", n, x)
	}
}

func TestBookBids(t *testing.T) {
	b := NewBook()
	mk := func(issuer peer.ID, id string, seq uint64) *pb.Bid {
		x := mtBid()
		x.Header.Issuer, x.Header.Id, x.Header.Seq = []byte(issuer), id, seq
		return x
	}
	for _, x := range []*pb.Bid{mk(mtPeers[1], "b", 1), mk(mtPeers[0], "b", 1), mk(mtPeers[0], "a", 2)} {
		if err := b.PutBid(x, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutBid(mk(mtPeers[0], "a", 2), mtNow); !errors.Is(err, ErrStale) {
		t.Errorf("same seq: %v", err)
	}
	if err := b.PutBid(mk(mtPeers[0], "a", 3), mtNow); err != nil {
		t.Fatal(err)
	}
	expired := mk(mtPeers[2], "x", 1)
	expired.Header.ExpiresUnixMs = mtNow.UnixMilli()
	if err := b.PutBid(expired, mtNow); !errors.Is(err, ErrExpired) {
		t.Errorf("expired bid: %v", err)
	}
	s := b.Snapshot()
	bids := s.Bids()
	if s.NumBids() != 3 || len(bids) != 3 || Issuer(bids[0]) > Issuer(bids[1]) {
		t.Fatalf("%d bids: %v", s.NumBids(), bids)
	}
	if x, ok := s.Bid(mtPeers[0], "a"); !ok || x.Header.Seq != 3 {
		t.Errorf("Bid lookup: %v %v", x, ok)
	}
	if _, ok := s.Bid(mtPeers[3], "a"); ok {
		t.Error("found a bid never put")
	}
}

func TestSnapshotIsImmutableAndCached(t *testing.T) {
	b := NewBook()
	for i := range 50 {
		if err := b.PutOffer(bkOffer(mtPeers[i%4], strconv.Itoa(i), 1, 30), mtNow); err != nil {
			t.Fatal(err)
		}
	}
	s1 := b.Snapshot()
	if b.Snapshot() != s1 {
		t.Error("an unchanged book built a new snapshot")
	}
	before := s1.Offers()
	for i := range 50 {
		if i%2 == 0 {
			b.PutOffer(withdrawal(mtPeers[i%4], strconv.Itoa(i), 2), mtNow)
		} else {
			b.PutOffer(bkOffer(mtPeers[i%4], strconv.Itoa(i), 3, 30), mtNow)
		}
	}
	b.PutOffer(bkOffer(mtPeers[5], "new", 1, 30), mtNow)
	if s1.Len() != 50 || !sameOffers(s1.Offers(), before) {
		t.Error("writes changed an earlier snapshot")
	}
	if got := seqOf(t, s1, mtPeers[1], "1"); got != 1 {
		t.Errorf("old snapshot sees seq %d", got)
	}
	s2 := b.Snapshot()
	if s2 == s1 || s2.Len() != 26 || seqOf(t, s2, mtPeers[1], "1") != 3 {
		t.Errorf("new snapshot: len %d", s2.Len())
	}
	checkSnapshot(t, s2)
	checkSnapshot(t, s1)
}

// checkSnapshot verifies a snapshot's indexes against its offers: every
// live offer sits, once, in the list of each tier it offers of each of its
// models' buckets, and every list is sorted.
func checkSnapshot(t testing.TB, s *Snapshot) {
	t.Helper()
	offers := s.Offers()
	if len(offers) != s.Len() {
		t.Fatalf("Len %d, Offers %d", s.Len(), len(offers))
	}
	want := map[string]int{}
	for _, o := range offers {
		models := map[string]bool{}
		for _, g := range o.Gpus {
			models[g.Model] = true
		}
		for m := range models {
			for _, tier := range o.Tiers {
				want[fmt.Sprintf("%s/%s/%s/%v", m, o.Region.Country, Issuer(o)+"/"+peer.ID(o.Header.Id), tier)]++
			}
		}
	}
	got := map[string]int{}
	for _, v := range s.views {
		for tier, list := range v.tiers {
			if !slices.IsSortedFunc(list, compareItems) {
				t.Errorf("bucket %s/%s tier %d is not sorted", v.model, v.country, tier)
			}
			for _, it := range list {
				if !it.e.live() {
					t.Fatalf("a tombstone in bucket %s/%s", v.model, v.country)
				}
				if o, ok := s.Offer(it.e.key.issuer, it.e.key.id); !ok || !proto.Equal(o, it.e.decode()) {
					t.Errorf("indexed offer %s not in the snapshot", it.e.key.id)
				}
				got[fmt.Sprintf("%s/%s/%s/%v", v.model, v.country, it.e.key.issuer+"/"+peer.ID(it.e.key.id), pb.Tier(tier))]++
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("index holds %d (bucket, offer, tier) entries, want %d", len(got), len(want))
	}
	for k, n := range got {
		if n != 1 || want[k] != 1 {
			t.Fatalf("index entry %s appears %d times, want %d", k, n, want[k])
		}
	}
}

func TestBookIndexesFollowChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := NewBook()
	seqs := map[string]uint64{}
	models := []string{"H100", "A100", "L40S"}
	for step := range 3000 {
		p, id := mtPeers[r.IntN(4)], strconv.Itoa(r.IntN(40))
		key := string(p) + id
		seqs[key]++
		var o *pb.Offer
		if r.IntN(5) == 0 {
			o = withdrawal(p, id, seqs[key])
		} else {
			o = bkOffer(p, id, seqs[key], 10+r.IntN(50))
			o.Gpus[0].Model = models[r.IntN(3)]
			o.Region.Country = []string{"DE", "FR"}[r.IntN(2)]
			o.PriceMicros = uint64(1+r.IntN(5)) * 500_000
			if r.IntN(4) == 0 {
				o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: models[r.IntN(3)], Count: 2, VramBytes: 40 << 30, ComputeCapability: 80})
			}
			o.Tiers = [][]pb.Tier{{pb.Tier_TIER_GOLD}, {pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE}, {pb.Tier_TIER_GOLD, pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE}}[r.IntN(3)]
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
		if r.IntN(100) == 0 {
			b.Expire(mtNow.Add(time.Duration(r.IntN(30)) * time.Minute))
		}
		if step%97 == 0 {
			checkSnapshot(t, b.Snapshot())
		}
	}
	checkSnapshot(t, b.Snapshot())
	// Many replacements without a snapshot: the buckets compact themselves.
	for i := range 2000 {
		p, id := mtPeers[i%2], strconv.Itoa(i%3)
		seqs[string(p)+id]++
		if err := b.PutOffer(bkOffer(p, id, seqs[string(p)+id], 30), mtNow); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	for _, bk := range b.order {
		if len(bk.removed) > bk.live+32 || len(bk.added) > bk.live+len(bk.removed) {
			t.Errorf("bucket %v holds %d removed, %d added for %d live", bk.key, len(bk.removed), len(bk.added), bk.live)
		}
	}
	b.mu.Unlock()
	checkSnapshot(t, b.Snapshot())
}

func TestFindOffers(t *testing.T) {
	noTierPrices := func(o *pb.Offer) { o.TierPrices = nil }
	expiresIn := func(o *pb.Offer, m int) {
		o.Header.ExpiresUnixMs = mtNow.Add(time.Duration(m) * time.Minute).UnixMilli()
	}
	b := mtBook(t,
		func(o *pb.Offer) {
			noTierPrices(o)
			o.PriceMicros, o.Gpus[0].VramBytes = 3_000_000, 96<<30
			expiresIn(o, 20)
		},
		func(o *pb.Offer) {
			noTierPrices(o)
			o.Gpus[0].Model, o.Gpus[0].VramBytes, o.PriceMicros = "A100", 40<<30, 1_500_000
			expiresIn(o, 10)
		},
		func(o *pb.Offer) {
			noTierPrices(o)
			o.Gpus[0].Model, o.Gpus[0].VramBytes, o.Region.Country = "RTX4090", 24<<30, "US"
			o.PriceMicros, o.Tiers = 400_000, []pb.Tier{pb.Tier_TIER_SILVER}
			expiresIn(o, 40)
		},
		func(o *pb.Offer) {
			noTierPrices(o)
			o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: "A100", Count: 2, VramBytes: 80 << 30, ComputeCapability: 80})
		},
	)
	s := b.Snapshot()
	ids := func(os []*pb.Offer) string {
		var out []string
		for _, o := range os {
			out = append(out, o.Header.Id)
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		f    OfferFilter
		want string
	}{
		{OfferFilter{}, "[o2 o1 o3 o0]"},
		{OfferFilter{GPUModel: "A100"}, "[o1 o3]"},
		{OfferFilter{GPUModel: "H100", SortBy: "price"}, "[o3 o0]"},
		{OfferFilter{MinVRAMBytes: 80 << 30, SortBy: "vram"}, "[o0 o3]"},
		{OfferFilter{GPUModel: "A100", MinVRAMBytes: 80 << 30}, "[o3]"},
		{OfferFilter{Country: "US"}, "[o2]"},
		{OfferFilter{Tier: pb.Tier_TIER_SILVER, MaxPriceMicros: 2_000_000}, "[o2 o1 o3]"},
		{OfferFilter{Tier: pb.Tier_TIER_GOLD}, "[o1 o3 o0]"},
		{OfferFilter{SortBy: "expiry"}, "[o1 o0 o2 o3]"},
		{OfferFilter{GPUModel: "TPU"}, "[]"},
		// A query reads the offer whole: num_gpus counts every GPU the
		// filters admit (o3's 8 H100s and 2 A100s, or its 2 A100s),
		// lease_gpus all of them, the host terms the whole host, price
		// the listed one (for the filter's tier); GPU terms on one group.
		{OfferFilter{Where: mustQuery(t, "num_gpus>=10")}, "[o3]"},
		{OfferFilter{GPUModel: "A100", Where: mustQuery(t, "num_gpus>=10")}, "[]"},
		{OfferFilter{GPUModel: "A100", Where: mustQuery(t, "num_gpus<=4")}, "[o3]"},
		{OfferFilter{Where: mustQuery(t, "gpu_ram>=80 compute>=9")}, "[o3 o0]"},
		{OfferFilter{GPUModel: "A100", Where: mustQuery(t, "gpu_ram>=80 compute>=9")}, "[]"},
		{OfferFilter{Where: mustQuery(t, "gpu_ram>=80 compute<9")}, "[o3]"},
		{OfferFilter{Where: mustQuery(t, "gpu_ram>=96 compute<9")}, "[]"},
		{OfferFilter{Where: mustQuery(t, "price<1.6")}, "[o2 o1]"},
		{OfferFilter{Tier: pb.Tier_TIER_GOLD, Where: mustQuery(t, "price<2.5")}, "[o1 o3]"},
		{OfferFilter{Where: mustQuery(t, "country!=DE")}, "[o2]"},
		{OfferFilter{Where: mustQuery(t, "cpu_cores>=64 ram>=512 lease_gpus>=8")}, "[o2 o1 o3 o0]"},
		{OfferFilter{GPUModel: "A100", Where: mustQuery(t, "cpu_cores>=64 ram>=512 lease_gpus>=10")}, "[o3]"},
		{OfferFilter{GPUModel: "A100", Where: mustQuery(t, "cpu_cores>=64 ram>=512")}, "[o1 o3]"},
		{OfferFilter{Where: mustQuery(t, "reliability>=1 rtt_ms<1000")}, "[]"}, // no source: RTTs unknown
		{OfferFilter{Where: mustQuery(t, "reliability>=1")}, "[o2 o1 o3 o0]"},
	} {
		if got := ids(s.FindOffers(tc.f)); got != tc.want {
			t.Errorf("%+v: got %s, want %s", tc.f, got, tc.want)
		}
	}
}

func mustQuery(t *testing.T, s string) Query {
	t.Helper()
	q, err := ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestSnapshotUnderConcurrentWriters runs writers and readers at once
// (run it with -race): every snapshot a reader takes stays consistent
// while the writers go on.
func TestSnapshotUnderConcurrentWriters(t *testing.T) {
	b := NewBook()
	const writers, perWriter = 4, 400
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() { writeOffers(t, b, mtPeers[w], perWriter) })
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() { readSnapshots(t, b, done) })
	}
	wg.Wait()
	close(done)
	readers.Wait()
	s := b.Snapshot()
	checkSnapshot(t, s)
	live := 0 // ids whose last write is an offer, not a withdrawal
	for i := perWriter - 50; i < perWriter; i++ {
		if i%7 != 0 {
			live++
		}
	}
	if s.Len() != writers*live {
		t.Errorf("%d offers, want %d", s.Len(), writers*live)
	}
}

// writeOffers puts n offers of p over 50 ids, every seventh a withdrawal,
// expiring the book now and then.
func writeOffers(t *testing.T, b *Book, p peer.ID, n int) {
	for i := range n {
		id, seq := strconv.Itoa(i%50), uint64(i/50+1)
		o := bkOffer(p, id, seq, 30)
		if i%7 == 0 {
			o = withdrawal(p, id, seq)
		}
		o.PriceMicros = uint64(1+i%9) * 250_000
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Error(err)
			return
		}
		if i%100 == 0 {
			b.Expire(mtNow)
		}
	}
}

// readSnapshots takes snapshots until done, and checks each is consistent
// and stays the same while it is read.
func readSnapshots(t *testing.T, b *Book, done <-chan struct{}) {
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	for {
		select {
		case <-done:
			return
		default:
		}
		s := b.Snapshot()
		n, first := s.Len(), s.Offers()
		res := m.Match(s, mtBid(), mtNow, 5)
		checkSnapshot(t, s)
		if s.Len() != n || !sameOffers(first, s.Offers()) || len(res.Candidates) > 5 {
			t.Error("a snapshot changed under its reader")
			return
		}
	}
}

// An entry's windows, read from its bytes alone, are the decoded
// offer's, field for field, whatever their values.
func TestEntryWindowsReadAsDecoded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := NewBook()
	for i := range 200 {
		o := mtOffer(mtPeers[i%len(mtPeers)], fmt.Sprintf("w%d", i))
		for range r.IntN(4) {
			o.Windows = append(o.Windows, &pb.Interval{StartUnixMs: int64(r.Uint64()), EndUnixMs: r.Int64N(1 << 45), FloorMicros: r.Uint64() >> r.IntN(64)})
		}
		for range r.IntN(4) {
			o.Weekly = append(o.Weekly, &pb.WeeklyWindow{StartMinute: r.Uint32(), EndMinute: r.Uint32N(minutesPerWeek), FloorMicros: r.Uint64N(5_000_000)})
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
		e := b.offers.get(keyOf(o.Header))
		oneOff, weekly := e.windows(nil, nil)
		c := evalCtx{o: e.decode()}
		wantOneOff, wantWeekly := c.windows()
		if !slices.Equal(oneOff, wantOneOff) || !slices.Equal(weekly, wantWeekly) || len(oneOff) != len(o.Windows) || len(weekly) != len(o.Weekly) {
			t.Fatalf("offer %d: read %v %v; decoded %v %v", i, oneOff, weekly, wantOneOff, wantWeekly)
		}
	}
}
