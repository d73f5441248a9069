package provider

import (
	"context"
	"sync"
	"testing"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A follower's verifier challenges at most maxPriceChallenges issuers a
// re-publish, the cheapest first, asks none that failed again within
// priceChallengeBackoff, and remembers at most maxPriceFailures failures
// however many keys fail.
func TestThePriceVerifierIsBoundedPerRepublishAndInMemory(t *testing.T) {
	clk := clock.NewFake()
	book := market.NewBook()
	cfg := config.DefaultProviderConfig()
	cfg.GPUs = []config.GPUConfig{{Model: "H100 SXM", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	price := map[peer.ID]uint64{}
	for i := range 40 {
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		c := cfg
		c.Price = market.FormatPrice(uint64(1_000_000 + 10_000*i))
		o, err := offer.Build(c, id, 1, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := book.PutOffer(o, clk.Now()); err != nil {
			t.Fatal(err)
		}
		price[id] = o.PriceMicros
	}
	var mu sync.Mutex
	var asked []peer.ID
	v := &PriceVerifier{
		Self: "me", Book: book.Snapshot, Clock: clk,
		Counts:  func(peer.ID) bool { return false },
		Located: func(peer.ID) bool { return true },
		Challenge: func(_ context.Context, p peer.ID) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, p)
			return false // none answers
		},
	}
	own, err := offer.Build(cfg, "me", 1, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[peer.ID]bool{}
	for round := range 3 {
		asked = nil
		v.Verify(context.Background(), own)
		if len(asked) != maxPriceChallenges {
			t.Fatalf("round %d: %d challenges, want %d", round, len(asked), maxPriceChallenges)
		}
		for _, p := range asked {
			if seen[p] {
				t.Errorf("round %d: %s asked again within the backoff", round, p)
			}
			seen[p] = true
			if price[p] >= uint64(1_000_000+10_000*maxPriceChallenges*(round+1)) {
				t.Errorf("round %d: asked %s at %s before cheaper ones", round, p, market.FormatPrice(price[p]))
			}
		}
	}
	clk.Advance(priceChallengeBackoff)
	asked = nil
	v.Verify(context.Background(), own)
	if len(asked) != maxPriceChallenges || price[asked[0]] > 1_030_000 {
		t.Errorf("after the backoff: asked %d, want the cheapest %d again", len(asked), maxPriceChallenges)
	}
	for range maxPriceFailures + 100 {
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		v.fail(id, clk.Now())
	}
	if n := len(v.failed); n > maxPriceFailures {
		t.Errorf("%d failures remembered, limit %d", n, maxPriceFailures)
	}
}
