package book

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// openMarket is a market side on an in-memory datastore, its owner
// running, with no network: the test delivers what readers and sync
// would.
func openMarket(t testing.TB) *Market {
	t.Helper()
	store := dssync.MutexWrap(ds.NewMapDatastore())
	m := New(Deps{Store: store, Clock: clock.System(), Log: slog.New(slog.DiscardHandler), Limits: market.DefaultLimits()})
	if err := m.Open(context.Background(), store); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Gossip and book sync deliver seq N and N+1 of many offers at once, in
// whatever order the scheduler makes: the sync path may verify N before
// gossip verifies N+1 and still hand it over after. Whatever the order,
// the envelope the market side hands to syncing peers is the one of the
// seq its book holds. (The node before its market owner, whose two paths
// each put the offer in the book and then stored its envelope under
// another lock, failed this in every run: 7 to 18 offers of 80,000, with
// and without -race.)
func TestHeldEnvelopeAlwaysMatchesTheBook(t *testing.T) {
	t.Parallel()
	const issuers, rounds = 16, 5000
	m := openMarket(t)
	ctx := context.Background()
	prov := config.DefaultConfig(config.ProfileProvider).Provider
	prov.GPUs = []config.GPUConfig{{Model: "A100", Count: 1, VRAMGiB: 80, ComputeCapability: "8.0"}}
	ids := make([]peer.ID, issuers)
	for i := range ids {
		_, pub, _ := crypto.GenerateEd25519Key(nil)
		ids[i], _ = peer.IDFromPublicKey(pub)
	}
	// offered is seq of issuer i's offer, as its validator passes it on, with
	// the envelope it came in: opaque to the market side, so here the seq
	// in decimal, for the check to read back.
	offered := func(i int, seq uint64) (*pb.Offer, []byte) {
		o, err := offer.Build(prov, ids[i], seq, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return o, []byte(strconv.FormatUint(seq, 10))
	}
	mismatches := 0
	for r := range rounds {
		// Both offers passed their checks in order: book sync verified
		// seq N, then the gossip validator seq N+1. Their deliveries, from
		// the sync fetch and the topic reader, race.
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range issuers {
			older, olderEnv := offered(i, uint64(2*r+1))
			newer, newerEnv := offered(i, uint64(2*r+2))
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				m.offer(ctx, older, olderEnv)
			}()
			go func() {
				defer wg.Done()
				<-start
				m.offer(ctx, newer, newerEnv)
			}()
		}
		close(start)
		wg.Wait()
		m.Do(ctx, func(st *State) {
			snap := m.Book.Snapshot()
			for i := range issuers {
				o, _ := snap.Offer(ids[i], offer.ProviderOfferID)
				held := string(st.envelopes[offerKey{ids[i], offer.ProviderOfferID}].env)
				if held != strconv.FormatUint(o.GetHeader().GetSeq(), 10) {
					mismatches++
					if mismatches <= 3 {
						t.Errorf("round %d, issuer %d: the envelope held is seq %s, the book's %d", r, i, held, o.GetHeader().GetSeq())
					}
				}
			}
		})
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d offers held an envelope of another seq than the book's", mismatches, issuers*rounds)
	}
	if n := m.Book.Snapshot().Len(); n != issuers {
		t.Fatalf("book holds %d offers, want %d", n, issuers)
	}
}

func TestSyncBudget(t *testing.T) {
	b := syncBudget{burst: 3, every: 10 * time.Second}
	t0 := time.Now()
	for i := range 3 {
		if !b.allow(t0) {
			t.Fatalf("sync %d of the burst refused", i+1)
		}
	}
	if b.allow(t0.Add(time.Second)) {
		t.Error("a fourth sync within 10 s allowed")
	}
	if !b.allow(t0.Add(11 * time.Second)) {
		t.Error("no sync allowed after 11 s")
	}
	if b.allow(t0.Add(12 * time.Second)) {
		t.Error("two syncs allowed in one period")
	}
	allowed := 0
	for range 4 {
		if b.allow(t0.Add(time.Hour)) {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("after a long quiet, %d syncs allowed at once; the burst is 3", allowed)
	}
}
