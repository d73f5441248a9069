package renter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
)

// at is a settled coordinate x milliseconds along the first axis.
func at(x float64) *pb.NetworkCoordinate {
	vec := make([]float64, 8)
	vec[0] = x / 1000
	return &pb.NetworkCoordinate{Vec: vec, Error: 0.2, Height: 1e-5}
}

func poolCand(id string, gpus uint32, c *pb.NetworkCoordinate) market.Candidate {
	return market.Candidate{Issuer: peer.ID(id), GPUs: gpus}.WithOffer(&pb.Offer{Coordinate: c})
}

// A pool takes, from the best candidates down, providers whose every pair
// is within the bound: it grows from the best seed that can reach the
// count, cuts the last member's GPUs to what the pool lacks, and pairs an
// offer without a settled coordinate with no one.
func TestAssemblePoolTakesProvidersWithinThePairBound(t *testing.T) {
	cands := []market.Candidate{
		poolCand("far", 8, at(100)),    // best, but alone
		poolCand("a", 8, at(0)),        // with b and c, 4 and 6 ms
		poolCand("unknown", 8, nil),    // pairs with none
		poolCand("b", 8, at(4)),        //
		poolCand("c", 8, at(6)),        //
		poolCand("d", 2, at(3)),        // too few for min 4
		poolCand("a", 8, at(0)),        // a second offer of a: not twice
		poolCand("e", 8, at(1)),        //
		poolCand("settling", 8, at(1)), // error too high to estimate by
	}
	cands[8].Offer().Coordinate.Error = 1.4
	pool, err := assemblePool(cands, 20, 4, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range pool {
		got = append(got, fmt.Sprintf("%s:%d", string(m.Issuer), m.GPUs))
	}
	if want := []string{"a:8", "b:8", "c:4"}; !slices.Equal(got, want) {
		t.Errorf("pool %v, want %v", got, want)
	}
	if _, err := assemblePool(cands, 20, 4, 3*time.Millisecond); err == nil || !strings.Contains(err.Error(), "the most found together: 16") {
		t.Errorf("within 3 ms: %v; want no pool, naming the 16 GPUs a and e make", err)
	}
	if pool, err := assemblePool(cands, 8, 1, time.Millisecond); err != nil || len(pool) != 1 || pool[0].Issuer != "far" {
		t.Errorf("8 GPUs: %v, %v; want the best candidate alone", pool, err)
	}
	// A member takes what its offer sells: c sells fours, so the 2 the
	// pool lacks come from d.
	cands[4].Offer().GpuStep = 4
	pool, err = assemblePool(cands, 18, 1, 10*time.Millisecond)
	got = nil
	for _, m := range pool {
		got = append(got, fmt.Sprintf("%s:%d", string(m.Issuer), m.GPUs))
	}
	if want := []string{"a:8", "b:8", "d:2"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("pool %v, %v; want %v", got, err, want)
	}
}

// A walk behind ten thousand made-up offers (issue 26, attack 4, in its
// cheaper in-process form): the one provider this node knows where to
// reach, ranked last, waits for the cheaper lookups under way only within
// locatePatience, never for the thousands not yet started, and is the
// walk's first try.
func TestAWalkTriesAFoundProviderOnceCheaperLookupsOutlastTheirPatience(t *testing.T) {
	t.Parallel()
	const fakes = 10_000
	cands := make([]market.Candidate, fakes+1)
	for i := range cands {
		id, err := test.RandPeerID()
		if err != nil {
			t.Fatal(err)
		}
		cands[i].Issuer = id
	}
	honest := cands[fakes].Issuer
	w := newWalkState(cands, func(p peer.ID) bool { return p == honest })
	t0 := time.Now()
	if started := w.start(t0); len(started) != locateAhead {
		t.Fatalf("%d lookups started at once; want %d", len(started), locateAhead)
	}
	i, wait, done := w.next(t0.Add(locatePatience / 2))
	if i != -1 || done || wait <= 0 || wait > locatePatience/2 {
		t.Errorf("within the patience: next %d, wait %s, done %v; want a wait of at most %s", i, wait, done, locatePatience/2)
	}
	if got := w.start(t0); len(got) != 0 {
		t.Errorf("%d more lookups started while %d are under way", len(got), locateAhead)
	}
	if i, _, _ := w.next(t0.Add(locatePatience)); i != fakes {
		t.Errorf("after the patience the walk tries candidate %d; want the honest one, %d", i, fakes)
	}
	// A lookup that fails is the fake's turn; one that ends frees a slot.
	if !w.ended(lookup{i: 0, err: context.DeadlineExceeded}) {
		t.Error("a failed lookup is not reported as tried")
	}
	if got := w.start(t0); len(got) != 1 || got[0] != locateAhead {
		t.Errorf("after one lookup ended, started %v; want [%d]", got, locateAhead)
	}
}

// syncingBook is a Book with n peers to sync with, counting the syncs a
// test makes, and nothing else.
type syncingBook struct {
	Book
	n      int
	synced atomic.Int64
}

func (b *syncingBook) SyncPeers() []peer.ID { return make([]peer.ID, b.n) }
func (b *syncingBook) Synced() int64        { return b.synced.Load() }

// A rental that finds an offer fits waits until the node has synced the
// books of a few peers (3, or every one it can if fewer), at most
// gatherSettle, before it ranks: a book one sync filled holds the first
// offers to arrive, not the nearest or the cheapest.
func TestARentalWaitsForAFewBookSyncs(t *testing.T) {
	for _, tc := range []struct{ peers, want int }{{5, gatherSyncs}, {2, 2}} {
		b := &syncingBook{n: tc.peers}
		r := &Renter{ctx: context.Background(), Market: b}
		done := make(chan int64)
		go func() { done <- r.awaitSyncs(context.Background()) }()
		for range tc.want {
			select {
			case got := <-done:
				t.Fatalf("%d peers: returned after %d syncs of %d", tc.peers, got, tc.want)
			case <-time.After(50 * time.Millisecond):
			}
			b.synced.Add(1)
		}
		select {
		case got := <-done:
			if got != int64(tc.want) {
				t.Errorf("%d peers: returned after %d syncs, want %d", tc.peers, got, tc.want)
			}
		case <-time.After(time.Second):
			t.Fatalf("%d peers: still waiting after %d syncs", tc.peers, tc.want)
		}
	}
}
