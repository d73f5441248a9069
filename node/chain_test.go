package node

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/p2p"
	"google.golang.org/protobuf/proto"
)

// chainEntry is a block of a served chain, opened, with the block beside
// it (nil for none).
type chainEntry struct{ block, link *chain.Block }

// servedChain is of's chain as it serves it to asker over ChainProtocol,
// checked whole by chain.Verify.
func servedChain(t *testing.T, asker, of *Node) []chainEntry {
	t.Helper()
	var signed, links []*pb.SignedBlock
	_, err := p2p.FetchChain(context.Background(), asker.host, asker.swarm, of.id, p2p.ChainQuery{From: 1}, func(raw []byte) {
		e := new(pb.ChainEntry)
		if err := proto.Unmarshal(raw, e); err != nil {
			t.Errorf("a chain entry: %v", err)
			return
		}
		signed, links = append(signed, e.Block), append(links, e.Link)
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := chain.Verify(of.id, of.swarm.Tag(), 1, signed)
	if err != nil {
		t.Fatalf("%s's chain: %v", of.id, err)
	}
	out := make([]chainEntry, len(blocks))
	for i, b := range blocks {
		out[i].block = b
		if links[i] != nil {
			if out[i].link, err = chain.Open(links[i]); err != nil {
				t.Fatalf("%s's block %d's link: %v", of.id, b.Seq, err)
			}
		}
	}
	return out
}

// A lease that ends as both sides agree leaves one record of it in each
// party's chain: the provider's proposal and the renter's agreement that
// completes it, on the very receipt both co-signed, each served with the
// other beside it and within the lease's co-signed term.
func TestBothPartiesChainOneRecordOfALease(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Lease.ID
	waitFor(t, 5*time.Second, "the provider holds the countersigned receipt", func() bool {
		return len(storedReceipt(t, prov, id).RenterSignature) > 0
	})
	waitFor(t, 5*time.Second, "the provider holds the renter's agreement beside its record", func() bool {
		pc := servedChain(t, renter, prov)
		return len(pc) == 1 && pc[0].link != nil
	})
	pc, rcChain := servedChain(t, renter, prov), servedChain(t, prov, renter)
	if len(pc) != 1 || len(rcChain) != 1 {
		t.Fatalf("chains of %d and %d records after one lease", len(pc), len(rcChain))
	}
	proposal, agreement := pc[0].block, rcChain[0].block
	if !proposal.Proposal() || !chain.Completes(agreement, proposal) || !chain.Completes(pc[0].link, proposal) || !chain.Completes(agreement, rcChain[0].link) {
		t.Error("the renter's agreement does not complete the provider's proposal, or a side serves another beside its own")
	}
	if got := storedReceipt(t, renter, id); string(got.Body) != string(proposal.Block.Receipt) {
		t.Error("the record is of another receipt than the one both signed")
	}
	if err := chain.CheckDates(proposal, time.Now(), time.Minute); err != nil {
		t.Error(err)
	}
}
