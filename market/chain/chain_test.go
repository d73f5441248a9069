package chain_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// A record proposed by the provider and completed by the renter's
// agreement: each in its owner's chain, linked by seq and hash, on the
// same receipt; both chains verify whole.
func TestARecordIsProposedAndCompletedInBothChains(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var rBlocks, pBlocks []*chain.Block
	for i := range 3 {
		l, cs := chaintest.Lease(t, fmt.Sprint("lease-", i), renter, provider, start.Add(time.Duration(i)*2*time.Hour))
		p := provider.Propose(t, chaintest.Receipt(l, cs, 50*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs)
		a := renter.Agree(t, p)
		if !chain.Completes(a, p) {
			t.Fatalf("lease %d: the agreement does not complete the proposal", i)
		}
		if a.Seq != uint64(i+1) || p.Seq != uint64(i+1) || a.LinkSeq != p.Seq {
			t.Errorf("lease %d: proposal %d, agreement %d linking %d", i, p.Seq, a.Seq, a.LinkSeq)
		}
		if err := chain.CheckDates(p, start.Add(24*time.Hour), time.Minute); err != nil {
			t.Errorf("lease %d: %v", i, err)
		}
		rBlocks, pBlocks = append(rBlocks, a), append(pBlocks, p)
	}
	for _, c := range []struct {
		owner  peer.ID
		blocks []*chain.Block
	}{{renter.ID, rBlocks}, {provider.ID, pBlocks}} {
		got, err := chain.Verify(c.owner, chaintest.Swarm, 1, chaintest.Signed(c.blocks...))
		if err != nil || len(got) != 3 {
			t.Errorf("%s's chain: %d blocks, %v", c.owner, len(got), err)
		}
		if got, err := chain.Verify(c.owner, chaintest.Swarm, 2, chaintest.Signed(c.blocks[1:]...)); err != nil || len(got) != 2 {
			t.Errorf("%s's chain from 2: %d blocks, %v", c.owner, len(got), err)
		}
	}
	other := chaintest.NewParty(t)
	if _, err := chain.Agree(other.Key, nil, pBlocks[0]); err == nil {
		t.Error("a peer agreed to a proposal made to another")
	}
	if chain.Completes(rBlocks[1], pBlocks[0]) {
		t.Error("an agreement completes a proposal it does not link to")
	}
}

// A provider that vanished leaves the renter's proposal of the failure
// half-signed in the renter's chain, visible to whoever reads it, and the
// renter's chain goes on past it.
func TestAHalfSignedRecordStaysInItsChain(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l, cs := chaintest.Lease(t, "vanished", renter, provider, start)
	half := renter.Propose(t, chaintest.Receipt(l, cs, 12*time.Second, pb.Outcome_OUTCOME_FAILED), cs)
	l2, cs2 := chaintest.Lease(t, "next", renter, chaintest.NewParty(t), start.Add(time.Hour))
	renter.Propose(t, chaintest.Receipt(l2, cs2, time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs2)
	got, err := chain.Verify(renter.ID, chaintest.Swarm, 1, chaintest.Signed(half, renter.Head))
	if err != nil || len(got) != 2 {
		t.Fatalf("the renter's chain: %d blocks, %v", len(got), err)
	}
	if rc := got[0].Receipt(); !got[0].Proposal() || rc.Outcome != pb.Outcome_OUTCOME_FAILED || got[0].Counterparty() != provider.ID {
		t.Errorf("the half-signed record reads as %v, %v against %s", got[0].Proposal(), rc.Outcome, got[0].Counterparty())
	}
}

// A served chain that leaves a block out, rewrites one, or closes one
// lease twice is caught, and the rewrite and the double record are proved
// by the owner's own two signatures.
func TestAChainsOmissionsAndRewritesAreCaught(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var blocks []*chain.Block
	var failed *chain.Block
	for i := range 4 {
		l, cs := chaintest.Lease(t, fmt.Sprint("lease-", i), renter, provider, start.Add(time.Duration(i)*2*time.Hour))
		o := pb.Outcome_OUTCOME_COMPLETED
		if i == 1 {
			o = pb.Outcome_OUTCOME_FAILED
		}
		b := provider.Propose(t, chaintest.Receipt(l, cs, 50*time.Minute, o), cs)
		if i == 1 {
			failed = b
		}
		blocks = append(blocks, b)
	}
	// Left out: the failed lease's block.
	_, err := chain.Verify(provider.ID, chaintest.Swarm, 1, chaintest.Signed(blocks[0], blocks[2], blocks[3]))
	if !errors.Is(err, chain.ErrGap) {
		t.Errorf("a chain served without block 2: %v, want a gap", err)
	}
	if _, err := chain.Verify(provider.ID, chaintest.Swarm, 1, chaintest.Signed(blocks[1:]...)); !errors.Is(err, chain.ErrGap) {
		t.Errorf("a chain from 1 served from block 2: %v, want a gap", err)
	}

	// Rewritten: the failure made a completion, in the block's place.
	rewritten := chaintest.Resign(t, provider.Key, failed, func(m *pb.Block) {
		rc := failed.Receipt()
		rc.Outcome = pb.Outcome_OUTCOME_COMPLETED
		m.Receipt, _ = proto.MarshalOptions{Deterministic: true}.Marshal(rc)
	})
	_, err = chain.Verify(provider.ID, chaintest.Swarm, 1, chaintest.Signed(blocks[0], rewritten, blocks[2], blocks[3]))
	var c *chain.Conflict
	if !errors.As(err, &c) || c.Kind != chain.BrokenLink {
		t.Fatalf("a chain with block 2 rewritten: %v, want a broken link", err)
	}
	if who, kind, err := chain.Prove(c.A, c.B, chaintest.Swarm); err != nil || who != provider.ID || kind != chain.BrokenLink {
		t.Errorf("the broken link proves %s, %v (%v)", who, kind, err)
	}
	if c := chain.Against(failed, rewritten); c == nil || c.Kind != chain.Fork {
		t.Errorf("the block held against its rewrite: %v, want a fork", c)
	}
	if who, kind, err := chain.Prove(failed.Signed, rewritten.Signed, chaintest.Swarm); err != nil || who != provider.ID || kind != chain.Fork {
		t.Errorf("the fork proves %s, %v (%v)", who, kind, err)
	}

	// Re-dated: the failed lease closed again, later in the chain, as a
	// short completion.
	l, cs := chaintest.Lease(t, "lease-1", renter, provider, start.Add(2*time.Hour))
	again := provider.Propose(t, chaintest.Receipt(l, cs, 5*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs)
	_, err = chain.Verify(provider.ID, chaintest.Swarm, 1, chaintest.Signed(append(blocks, again)...))
	if !errors.As(err, &c) || c.Kind != chain.TwoRecords {
		t.Fatalf("a chain closing lease-1 twice: %v, want two records", err)
	}
	if who, kind, err := chain.Prove(c.A, c.B, chaintest.Swarm); err != nil || who != provider.ID || kind != chain.TwoRecords {
		t.Errorf("the two records prove %s, %v (%v)", who, kind, err)
	}

	// Not proof: two blocks that agree, one block twice, two owners' blocks,
	// a conflict shown in another swarm.
	for _, c := range []struct {
		name string
		a, b *chain.Block
		sw   string
	}{
		{"consecutive blocks", blocks[0], blocks[1], chaintest.Swarm},
		{"one block twice", blocks[2], blocks[2], chaintest.Swarm},
		{"two owners' blocks", blocks[0], renter.Agree(t, blocks[0]), chaintest.Swarm},
		{"a fork in another swarm", failed, rewritten, "elsewhere"},
	} {
		if who, _, err := chain.Prove(c.a.Signed, c.b.Signed, c.sw); err == nil {
			t.Errorf("%s prove %s lied", c.name, who)
		}
	}
}

// A proposal's receipt must end within its lease's co-signed term and
// not after the checker's clock, start when its lease does and meter no
// more than its term; a block signed by another than its owner, or
// naming another lease, does not open.
func TestABlocksDatesAreCheckedAgainstItsLease(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := start.Add(30 * time.Minute)
	l, cs := chaintest.Lease(t, "l", renter, provider, start)
	good := chaintest.Receipt(l, cs, 20*time.Minute, pb.Outcome_OUTCOME_COMPLETED)
	b, err := chain.Propose(provider.Key, nil, good, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.CheckDates(b, now, time.Minute); err != nil {
		t.Fatalf("a good receipt: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(rc *pb.Receipt)
	}{
		{"ends ten years ahead", func(rc *pb.Receipt) { rc.EndUnixMs = start.AddDate(10, 0, 0).UnixMilli() }},
		{"ends after now, within its term", func(rc *pb.Receipt) { rc.EndUnixMs = now.Add(10 * time.Minute).UnixMilli() }},
		{"ends past its term", func(rc *pb.Receipt) { rc.EndUnixMs = start.Add(2 * time.Hour).UnixMilli() }},
		{"starts a day early", func(rc *pb.Receipt) { rc.StartUnixMs = start.Add(-24 * time.Hour).UnixMilli() }},
		{"ends before it starts", func(rc *pb.Receipt) { rc.EndUnixMs = start.Add(-time.Minute).UnixMilli() }},
		{"meters more than its term", func(rc *pb.Receipt) { rc.MeteredSeconds = 7200 }},
	} {
		rc := proto.Clone(good).(*pb.Receipt)
		c.change(rc)
		b, err := chain.Propose(provider.Key, nil, rc, cs, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := chain.CheckDates(b, now, time.Minute); !errors.Is(err, chain.ErrDates) {
			t.Errorf("a receipt that %s: %v, want chain.ErrDates", c.name, err)
		}
	}
	if err := chain.CheckDates(b, start.Add(10*time.Minute), time.Minute); !errors.Is(err, chain.ErrDates) {
		t.Errorf("checked by a clock before the receipt's end: %v", err)
	}

	_, otherCS := chaintest.Lease(t, "other", renter, provider, start)
	if _, err := chain.Propose(provider.Key, nil, good, otherCS, nil); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a receipt carried with another lease: %v", err)
	}
	stranger := chaintest.NewParty(t)
	if _, err := chain.Propose(stranger.Key, nil, good, cs, nil); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a stranger's proposal of the parties' receipt: %v", err)
	}
	renterOnly, err := market.NewCoSigned(renter.Key, market.Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chain.Propose(provider.Key, nil, good, renterOnly, nil); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a lease the provider never signed: %v", err)
	}
	forged := &pb.SignedBlock{Body: b.Signed.Body, Signature: append([]byte(nil), b.Signed.Signature...)}
	forged.Signature[0] ^= 1
	if _, err := chain.Open(forged); !errors.Is(err, chain.ErrSignature) {
		t.Errorf("a block with a bad signature: %v", err)
	}
	huge := &pb.SignedBlock{Body: make([]byte, chain.MaxBlockSize+1)}
	if _, err := chain.Open(huge); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a block over chain.MaxBlockSize: %v", err)
	}
	if _, err := chain.Verify(provider.ID, "elsewhere", 1, chaintest.Signed(b)); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a chain served into another swarm: %v", err)
	}
	if _, err := chain.Verify(renter.ID, chaintest.Swarm, 1, chaintest.Signed(b)); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("the provider's block served as the renter's chain: %v", err)
	}
}

// An extended lease's record carries the extension that set its term,
// and its receipt may end within the extended term, not past it.
func TestAnExtendedLeasesRecordCarriesItsExtension(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l, cs := chaintest.Lease(t, "l", renter, provider, start)
	ext, err := market.NewCoSigned(renter.Key, market.Renter, market.LeaseTerm(l, cs).NewExtension(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CoSign[*pb.Extension](provider.Key, market.Provider, ext); err != nil {
		t.Fatal(err)
	}
	term, err := market.LeaseTerm(l, cs).Extend(ext, market.Renter, market.Provider)
	if err != nil {
		t.Fatal(err)
	}
	end := start.Add(90 * time.Minute) // past the lease's hour, within the extended two
	rc := market.NewReceipt(term.Lease, cs, market.ReceiptTerms{Outcome: pb.Outcome_OUTCOME_COMPLETED, End: end, LastBeat: end, ExtensionHash: term.ExtensionHash()})
	b, err := chain.Propose(provider.Key, nil, rc, cs, ext)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.CheckDates(b, end, time.Minute); err != nil {
		t.Errorf("a receipt within its extended term: %v", err)
	}
	if _, err := chain.Propose(provider.Key, nil, rc, cs, nil); !errors.Is(err, chain.ErrBlock) {
		t.Errorf("a receipt naming an extension its record does not carry: %v", err)
	}
	late := proto.Clone(rc).(*pb.Receipt)
	late.EndUnixMs = start.Add(3 * time.Hour).UnixMilli()
	if b, err := chain.Propose(provider.Key, nil, late, cs, ext); err != nil || !errors.Is(chain.CheckDates(b, start.Add(4*time.Hour), time.Minute), chain.ErrDates) {
		t.Errorf("a receipt past its extended term: %v", err)
	}
}

// Open never panics on what a peer sends.
func FuzzOpen(f *testing.F) {
	renter, provider := chaintest.NewParty(f), chaintest.NewParty(f)
	l, cs := chaintest.Lease(f, "l", renter, provider, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	b := provider.Propose(f, chaintest.Receipt(l, cs, time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs)
	a := renter.Agree(f, b)
	for _, x := range []*chain.Block{a, b} {
		data, _ := proto.Marshal(x.Signed)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sb := new(pb.SignedBlock)
		if proto.Unmarshal(data, sb) != nil {
			return
		}
		if b, err := chain.Open(sb); err == nil {
			chain.CheckDates(b, time.Now(), time.Minute)
			chain.Verify(b.Owner(), b.Swarm, b.Seq, []*pb.SignedBlock{sb, sb})
		}
	})
}
