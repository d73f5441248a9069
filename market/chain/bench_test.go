package chain_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkVerify checks one answer of a chain (64 blocks, each a
// provider's proposal whose renter agreed), as a node learning about a
// provider does, beside the reference: raw ed25519 verifies of the same
// blocks' signatures alone, three per proposal (the owner's, and the
// term's two). It reports the time per block and its ratio to the
// reference's per block; the bytes per block served.
func BenchmarkVerify(b *testing.B) {
	prov := chaintest.NewParty(b)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var blocks []*chain.Block
	for i := range 64 {
		ren := chaintest.NewParty(b)
		l, cs := chaintest.Lease(b, fmt.Sprint("lease-", i), ren, prov, start.Add(time.Duration(i)*time.Hour))
		blocks = append(blocks, prov.Propose(b, chaintest.Receipt(l, cs, 30*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs))
	}
	signed := chaintest.Signed(blocks...)
	size := 0
	for _, sb := range signed {
		size += proto.Size(sb)
	}
	pub := prov.Key.GetPublic()
	raw := func() {
		for _, blk := range blocks {
			pub.Verify(blk.Signed.Body, blk.Signed.Signature) // the bytes differ from what was signed: the cost is the same
			pub.Verify(blk.Term.Body, blk.Term.RenterSignature)
			pub.Verify(blk.Term.Body, blk.Term.ProviderSignature)
		}
	}
	// The reference, timed in the same run: as many raw passes as the
	// benchmark makes of the chain.
	t0 := time.Now()
	for range b.N {
		raw()
	}
	refPer := float64(time.Since(t0).Nanoseconds()) / float64(b.N) / 64
	b.ResetTimer()
	for range b.N {
		if _, err := chain.Verify(prov.ID, chaintest.Swarm, 1, signed); err != nil {
			b.Fatal(err)
		}
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 64
	b.ReportMetric(per/1e3, "µs/block")
	b.ReportMetric(per/refPer, "x-raw-verifies")
	b.ReportMetric(float64(size)/64, "bytes/block")
}
