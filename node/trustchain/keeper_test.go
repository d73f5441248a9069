package trustchain

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	"github.com/idlegrid/idlegrid/market/pb"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// openStore is a pebble datastore in dir, as a node opens its own.
func openStore(t *testing.T, dir string) *pebbleds.Datastore {
	t.Helper()
	store, err := pebbleds.NewDatastore(dir, pebbleds.WithPebbleWriteOptions(pebble.Sync))
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// Records made as leases end, one at a time or many at once, form one
// chain with no gap and no fork, one record per lease however often its
// end is recorded; the chain is the same after the datastore is opened
// again, and goes on from its head.
func TestTheChainIsOneRecordPerLeaseAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ds")
	store := openStore(t, dir)
	provider, renter := chaintest.NewParty(t), chaintest.NewParty(t)
	k, err := Open(ctx, provider.Key, store)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	type ended struct {
		rc *pb.Receipt
		cs *pb.CoSigned
	}
	var leases []ended
	for i := range 20 {
		l, cs := chaintest.Lease(t, "lease", renter, provider, start.Add(time.Duration(i)*time.Hour)) // one ID, twenty leases
		leases = append(leases, ended{chaintest.Receipt(l, cs, 10*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs})
	}
	var wg sync.WaitGroup
	twice := make([][2]*chain.Block, len(leases))
	for i, e := range leases {
		for j := range 2 { // each lease's end recorded twice, at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := k.Propose(ctx, e.rc, e.cs, nil)
				if err != nil {
					t.Error(err)
					return
				}
				twice[i][j] = b
			}()
		}
	}
	wg.Wait()
	blocks := make([]*chain.Block, len(leases))
	for i, bs := range twice {
		if bs[0] == nil || bs[1] == nil || !proto.Equal(bs[0].Signed, bs[1].Signed) {
			t.Fatalf("lease %d's end recorded twice at once: two records, or none", i)
		}
		blocks[i] = bs[0]
	}
	check := func(k *Keeper, want int) []*chain.Block {
		t.Helper()
		raw, err := k.Range(ctx, 1, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		var signed []*pb.SignedBlock
		for _, r := range raw {
			e := new(pb.ChainEntry)
			if err := proto.Unmarshal(r, e); err != nil {
				t.Fatal(err)
			}
			signed = append(signed, e.Block)
		}
		got, err := chain.Verify(provider.ID, chaintest.Swarm, 1, signed)
		if err != nil || len(got) != want {
			t.Fatalf("the chain: %d blocks, want %d (%v)", len(got), want, err)
		}
		return got
	}
	got := check(k, len(leases))
	for i, b := range blocks {
		if had, err := k.Of(ctx, leases[i].rc.LeaseHash); err != nil || !proto.Equal(had.Signed, b.Signed) {
			t.Errorf("lease %d's record: %v", i, err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store = openStore(t, dir)
	defer store.Close()
	k, err = Open(ctx, provider.Key, store)
	if err != nil {
		t.Fatal(err)
	}
	if head, _ := k.Head(ctx); head == nil || !proto.Equal(head.Signed, got[len(got)-1].Signed) {
		t.Fatalf("the head after a restart: %v", head)
	}
	again, err := k.Propose(ctx, leases[3].rc, leases[3].cs, nil)
	if err != nil || !proto.Equal(again.Signed, blocks[3].Signed) {
		t.Errorf("lease 3's end recorded again after a restart: block %d (%v), want its record %d", again.GetSeq(), err, blocks[3].Seq)
	}
	l, cs := chaintest.Lease(t, "next", renter, provider, start.Add(30*time.Hour))
	if b, err := k.Propose(ctx, chaintest.Receipt(l, cs, time.Minute, pb.Outcome_OUTCOME_FAILED), cs, nil); err != nil || b.Seq != uint64(len(leases)+1) {
		t.Fatalf("the next lease after a restart: block %d (%v)", b.GetSeq(), err)
	}
	check(k, len(leases)+1)
}

// The renter completes the provider's proposal in its own chain and the
// provider keeps the agreement beside its proposal; each serves its block
// with the other's beside it. A renter that closed the lease with a
// record of its own agrees to no other.
func TestAProposalIsCompletedAndServedWithItsAgreement(t *testing.T) {
	ctx := context.Background()
	provider, renter := chaintest.NewParty(t), chaintest.NewParty(t)
	ps, rs := openStore(t, t.TempDir()), openStore(t, t.TempDir())
	defer ps.Close()
	defer rs.Close()
	pk, err := Open(ctx, provider.Key, ps)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := Open(ctx, renter.Key, rs)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l, cs := chaintest.Lease(t, "l", renter, provider, start)
	rc := chaintest.Receipt(l, cs, 10*time.Minute, pb.Outcome_OUTCOME_COMPLETED)
	p, err := pk.Propose(ctx, rc, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rk.Agree(ctx, p.Signed, []byte("another receipt")); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("an agreement to a proposal of another receipt than the one countersigned: %v", err)
	}
	a, err := rk.Agree(ctx, p.Signed, p.Block.Receipt)
	if err != nil || !chain.Completes(a, p) {
		t.Fatalf("the renter's agreement: %v", err)
	}
	if again, err := rk.Agree(ctx, p.Signed, p.Block.Receipt); err != nil || !proto.Equal(again.Signed, a.Signed) {
		t.Errorf("the same proposal agreed to again: %v", err)
	}
	if err := pk.Completed(ctx, p, p.Signed); err == nil {
		t.Error("the provider kept its own proposal as its completion")
	}
	if err := pk.Completed(ctx, p, a.Signed); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k          *Keeper
		mine, link *chain.Block
	}{{pk, p, a}, {rk, a, p}} {
		raw, err := c.k.Range(ctx, 1, 10, "")
		if err != nil || len(raw) != 1 {
			t.Fatalf("served %d entries (%v)", len(raw), err)
		}
		e := new(pb.ChainEntry)
		if err := proto.Unmarshal(raw[0], e); err != nil || !proto.Equal(e.Block, c.mine.Signed) || !proto.Equal(e.Link, c.link.Signed) {
			t.Errorf("%s serves %v beside its block (%v)", c.mine.Owner(), e.Link, err)
		}
	}

	// The renter closed the next lease itself (the provider went away);
	// the provider's later proposal finds it closed.
	l2, cs2 := chaintest.Lease(t, "l2", renter, provider, start.Add(time.Hour))
	if _, err := rk.Propose(ctx, chaintest.Receipt(l2, cs2, 12*time.Second, pb.Outcome_OUTCOME_FAILED), cs2, nil); err != nil {
		t.Fatal(err)
	}
	late, err := pk.Propose(ctx, chaintest.Receipt(l2, cs2, 128*time.Second, pb.Outcome_OUTCOME_COMPLETED), cs2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rk.Agree(ctx, late.Signed, late.Block.Receipt); !errors.Is(err, ErrClosed) {
		t.Errorf("the renter agreed to a second record of a lease it closed: %v", err)
	}
}

// A chain is served from a seq or its newest blocks, and, for one
// counterparty, only the blocks of leases with it, from a seq or the
// newest; none past the limit.
func TestRangeServesTheNewestAndOneCounterpartysBlocks(t *testing.T) {
	ctx := context.Background()
	provider, a, b := chaintest.NewParty(t), chaintest.NewParty(t), chaintest.NewParty(t)
	k, err := Open(ctx, provider.Key, openStore(t, filepath.Join(t.TempDir(), "ds")))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 10 { // a's leases are blocks 1, 4, 7 and 10
		ren := b
		if i%3 == 0 {
			ren = a
		}
		l, cs := chaintest.Lease(t, "lease", ren, provider, start.Add(time.Duration(i)*time.Hour))
		if _, err := k.Propose(ctx, chaintest.Receipt(l, cs, 10*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs, nil); err != nil {
			t.Fatal(err)
		}
	}
	type query struct {
		from  uint64
		limit int
		about peer.ID
	}
	seqs := func(q query) []uint64 {
		t.Helper()
		raw, err := k.Range(ctx, q.from, q.limit, q.about)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, r := range raw {
			e := new(pb.ChainEntry)
			if err := proto.Unmarshal(r, e); err != nil {
				t.Fatal(err)
			}
			bl, err := chain.Open(e.Block)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, bl.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		q    query
		want []uint64
	}{
		{query{8, 64, ""}, []uint64{8, 9, 10}},
		{query{0, 3, ""}, []uint64{8, 9, 10}},
		{query{0, 30, ""}, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{query{1, 0, ""}, nil},
		{query{2, 64, a.ID}, []uint64{4, 7, 10}},
		{query{1, 2, a.ID}, []uint64{1, 4}},
		{query{0, 2, a.ID}, []uint64{7, 10}},
		{query{0, 64, chaintest.NewParty(t).ID}, nil},
	} {
		if got := seqs(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: blocks %v, want %v", tc.q, got, tc.want)
		}
	}
}
