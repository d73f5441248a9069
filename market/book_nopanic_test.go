package market

import (
	"strconv"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestABookNeverPanicsWhenABucketEmptiesBetweenSnapshots drives a bucket
// into the state a peer reached on the network: a bucket with no probes
// published (never snapshotted, or emptied since) whose dead entries
// outnumber its live ones by more than 32, so unindex rebuilds it with
// nothing to add. Every way an entry leaves the book gets there:
// replacement, withdrawal, expiry and eviction. The book must survive
// each and index what it holds afterwards.
func TestABookNeverPanicsWhenABucketEmptiesBetweenSnapshots(t *testing.T) {
	p := mtPeers[0]
	cases := []struct {
		name string
		run  func(t *testing.T, b *Book)
	}{
		{"one offer replaced 34 times before any snapshot", func(t *testing.T, b *Book) {
			for seq := uint64(1); seq <= 34; seq++ {
				mustPut(t, b, bkOffer(p, "a", seq, 30))
			}
		}},
		{"one offer replaced 70 times after a snapshot", func(t *testing.T, b *Book) {
			mustPut(t, b, bkOffer(p, "a", 1, 30))
			b.Snapshot()
			for seq := uint64(2); seq <= 70; seq++ {
				mustPut(t, b, bkOffer(p, "a", seq, 30))
			}
		}},
		{"33 offers withdrawn before any snapshot", func(t *testing.T, b *Book) {
			for i := range 33 {
				mustPut(t, b, bkOffer(p, strconv.Itoa(i), 1, 30))
			}
			for i := range 33 {
				mustPut(t, b, withdrawal(p, strconv.Itoa(i), 2))
			}
		}},
		{"33 offers expired before any snapshot", func(t *testing.T, b *Book) {
			for i := range 33 {
				mustPut(t, b, bkOffer(p, strconv.Itoa(i), 1, 10))
			}
			if n, _ := b.Expire(mtNow.Add(20 * time.Minute)); n != 33 {
				t.Fatalf("expired %d offers, want 33", n)
			}
		}},
		{"33 offers evicted before any snapshot", func(t *testing.T, b *Book) {
			known := mtPeers[1]
			b.SetLimits(BookLimits{Offers: 33}, func(id peer.ID) int {
				switch id {
				case p:
					return RankUnknown
				case known:
					return RankKnown
				}
				return RankOwn // the one that comes after
			}, nil)
			for i := range 33 {
				mustPut(t, b, bkOffer(p, strconv.Itoa(i), 1, 30))
			}
			for i := range 33 { // of another model: the first bucket empties
				o := bkOffer(known, strconv.Itoa(i), 1, 30)
				o.Gpus[0].Model = "A100"
				mustPut(t, b, o)
			}
			if n, _ := b.Evicted(); n != 33 {
				t.Fatalf("evicted %d offers, want 33", n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBook()
			c.run(t, b)
			// The book still takes offers into the emptied bucket and
			// indexes them.
			mustPut(t, b, bkOffer(mtPeers[2], "after", 1, 30))
			checkSnapshot(t, b.Snapshot())
		})
	}
}

func mustPut(t *testing.T, b *Book, o *pb.Offer) {
	t.Helper()
	if err := b.PutOffer(o, mtNow); err != nil {
		t.Fatal(err)
	}
}
