package market

import (
	"errors"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A full book refuses new keys of the lowest standing it holds and lets
// a better-ranked issuer displace the newest of them (issue 11, attack 5:
// the book had no limit, and 230k offers from 50 keys lost honest ones).
func TestAFullBookEvictsByRankThenNewestFirst(t *testing.T) {
	flood := benchPeers(6, 77)
	known := mtPeers[0]
	var evicted []string
	b := NewBook()
	b.SetLimits(BookLimits{Offers: 4, Bids: 2}, func(p peer.ID) int {
		if p == known {
			return RankKnown
		}
		return RankUnknown
	}, func(issuer peer.ID, id string) { evicted = append(evicted, issuer.String()+"/"+id) })
	for _, p := range flood[:4] {
		if err := b.PutOffer(bkOffer(p, "o", 1, 30), mtNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutOffer(bkOffer(flood[4], "o", 1, 30), mtNow); !errors.Is(err, ErrBookFull) {
		t.Fatalf("a fifth unknown key in a book of 4: %v, want ErrBookFull", err)
	}
	// What the book holds is still renewed while it is full.
	if err := b.PutOffer(bkOffer(flood[0], "o", 2, 30), mtNow); err != nil {
		t.Errorf("a held key's next seq in a full book: %v", err)
	}
	// A known issuer displaces the newest unknown key, which may return
	// later, as a message the book has not seen.
	if err := b.PutOffer(bkOffer(known, "o", 1, 30), mtNow); err != nil {
		t.Fatalf("a known issuer in a full book: %v", err)
	}
	if len(evicted) != 1 || evicted[0] != flood[3].String()+"/o" {
		t.Errorf("evicted %v; want the newest unknown key, %s/o", evicted, flood[3])
	}
	s := b.Snapshot()
	if _, ok := s.Offer(known, "o"); !ok || s.Len() != 4 {
		t.Errorf("book holds %d offers, the known issuer's: %v", s.Len(), ok)
	}
	if n, _ := remembered(b); n != 4 {
		t.Errorf("book remembers %d offer keys; its limit is 4", n)
	}
	if o, _ := b.Evicted(); o != 1 {
		t.Errorf("Evicted says %d offers", o)
	}
	// Known keys fill it: then an unknown one has nothing to displace and
	// a known one nothing below it.
	for _, id := range []string{"a", "b", "c"} {
		if err := b.PutOffer(bkOffer(known, id, 1, 30), mtNow); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutOffer(bkOffer(known, "d", 1, 30), mtNow); !errors.Is(err, ErrBookFull) {
		t.Errorf("a known key in a book full of known keys: %v", err)
	}
	// Room comes back as keys are forgotten.
	later := mtNow.Add(DefaultLimits().MaxHorizon + time.Hour)
	b.Expire(later) // the live keys expire, then their seqs are forgotten
	b.Expire(later)
	o := bkOffer(flood[5], "o", 1, 30)
	o.Header.CreatedUnixMs, o.Header.ExpiresUnixMs = later.UnixMilli(), later.Add(time.Hour).UnixMilli()
	if err := b.PutOffer(o, later); err != nil {
		t.Errorf("after the keys were forgotten: %v", err)
	}

	// Bids keep to their own limit.
	bid := func(p peer.ID) *pb.Bid {
		x := mtBid()
		x.Header.Issuer = []byte(p)
		return x
	}
	for i, p := range flood[:3] {
		if err := b.PutBid(bid(p), mtNow); (i < 2) != (err == nil) || i == 2 && !errors.Is(err, ErrBookFull) {
			t.Errorf("bid %d in a book of 2: %v", i, err)
		}
	}
	if err := b.PutBid(bid(known), mtNow); err != nil || b.Snapshot().NumBids() != 2 {
		t.Errorf("a known issuer's bid in a full book: %v, %d bids", err, b.Snapshot().NumBids())
	}
}

// The arrival stacks stay bounded by what the book holds, however many
// keys come and go.
func TestBookRoomStaysBoundedUnderChurn(t *testing.T) {
	b := NewBook()
	b.SetLimits(BookLimits{Offers: 100}, nil, nil)
	ps := benchPeers(50, 5)
	now := mtNow
	for round := range 40 {
		for i, p := range ps {
			o := bkOffer(p, "o", uint64(round+1), 1)
			o.Header.Id = string(rune('a'+round%26)) + string(rune('a'+i%26))
			o.Header.CreatedUnixMs, o.Header.ExpiresUnixMs = now.UnixMilli(), now.Add(time.Minute).UnixMilli()
			if err := b.PutOffer(o, now); err != nil && !errors.Is(err, ErrBookFull) {
				t.Fatal(err)
			}
		}
		now = now.Add(DefaultLimits().MaxHorizon + time.Hour)
		b.Expire(now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, held := len(b.offerRoom.stack[0]), b.offerRoom.held[0]; n > 2*held+64 || held > 100 {
		t.Errorf("arrival stack %d keys for %d held", n, held)
	}
	// Every key the book holds is counted and stacked, so it can go.
	stacked := map[bookKey]bool{}
	for _, k := range b.offerRoom.stack[0] {
		stacked[k] = true
	}
	held := 0
	for _, sh := range b.offers {
		if sh == nil {
			continue
		}
		for k := range sh.m {
			held++
			if !stacked[k] {
				t.Errorf("key %v held but not stacked", k)
			}
		}
	}
	if held != b.offerRoom.held[0] {
		t.Errorf("book holds %d keys, its room counts %d", held, b.offerRoom.held[0])
	}
}
