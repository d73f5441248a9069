package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/p2p"
)

// TestMadeUpOffersDoNotWalkAMarketFollowersPrice replays attack 12 of
// issue 26 on real nodes: a provider follows the market's median from
// 2.49 (floor 1.50) while fresh keys publish cheap offers of its model.
// Made up offers from keys it has verified nothing of leave its price
// where it stands over four re-publishes (it cannot locate their issuers,
// so it does not even challenge them). Then three real providers at 1.00
// appear, and before it re-prices the follower challenges them and
// verifies their attestations: now they count, and its price comes down,
// by at most a tenth (provider.pricing.max_step's default) per
// re-publish.
func TestMadeUpOffersDoNotWalkAMarketFollowersPrice(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake()
	boot := startNode(t, testRepo(t, "boot", nil), Options{Clock: clk})
	attested := func(price string) func(*config.Config) {
		return func(c *config.Config) {
			c.Provider.Enabled = true
			c.Provider.GPUSource = "fake:dgxh100" // GPUs it can attest
			c.Provider.Price = price
			c.Provider.Pricing = config.PricingConfig{Policy: config.PolicyFixed, PeakFactor: 1}
		}
	}
	follower := startNode(t, testRepo(t, "follower", both(bootstrapFrom(boot), attested("2.49"), func(c *config.Config) {
		c.Provider.Pricing = config.PricingConfig{Policy: config.PolicyMarket, Percentile: 50, Floor: "1.50", Ceiling: "9.00", PeakFactor: 1}
		c.Provider.OfferTTL = config.Dur(time.Minute)
	})), Options{Clock: clk})
	waitFor(t, 20*time.Second, "the follower's first offer", func() bool { _, ok := follower.provider.OwnOffer(); return ok })
	own, _ := follower.provider.OwnOffer()

	cfg := follower.provider.Config()
	cfg.GPUs = []config.GPUConfig{{Model: own.Gpus[0].Model, Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	cfg.Price, cfg.Pricing, cfg.OfferTTL = "1.00", config.PricingConfig{Policy: config.PolicyFixed, PeakFactor: 1}, config.Dur(time.Hour)
	const fakes = 40
	publishStrangers(t, boot, cfg, fakes)
	waitFor(t, 20*time.Second, "the follower's book holds the made-up offers", bookHolds(follower, 1+fakes))

	republish := func() uint64 {
		t.Helper()
		before, _ := follower.provider.OwnOffer()
		clk.Advance(46 * time.Second) // past three quarters of the offer's TTL
		waitFor(t, 15*time.Second, "the follower re-publishes", func() bool {
			o, ok := follower.provider.OwnOffer()
			return ok && o.Header.Seq > before.Header.Seq
		})
		o, _ := follower.provider.OwnOffer()
		return o.PriceMicros
	}
	for round := 1; round <= 4; round++ {
		if p := republish(); p != 2_490_000 {
			t.Fatalf("re-publish %d beside %d made-up offers at 1.00: the follower asks %s, want 2.49 (they must not count)", round, fakes, market.FormatPrice(p))
		}
	}
	if pr := follower.provider.Pricing(); pr == nil || pr.Tiers[0].Comparable != 0 {
		t.Errorf("pricing %+v: want no comparable offers", pr)
	}

	var real []*Node
	for _, name := range []string{"a", "b", "c"} {
		real = append(real, startNode(t, testRepo(t, name, both(bootstrapFrom(boot), attested("1.00"))), Options{Clock: clk}))
	}
	holdsReal := func() bool {
		for _, n := range real {
			if _, ok := follower.market.Snapshot().Offer(n.id, offer.ProviderOfferID); !ok {
				return false
			}
		}
		return true
	}
	// Gossip brings the real offers. One it lost the node's periodic
	// resync brings, from a random peer each time; it runs on the node's
	// clock, held still here, so the test runs it itself, from each peer
	// in turn. A held clock also refills no budget: an offer that found
	// the strangers' budget spent by the made-up ones (a busy machine
	// delays what spends it and what refills it alike) stays out until a
	// sync brings it.
	if !waitUntil(10*time.Second, holdsReal) {
		t.Logf("gossip did not bring every real offer within 10s; syncing the follower's book from each of its peers, as its resync would. %s", realOffersAt(follower, boot, real))
		for _, p := range append([]*Node{boot}, real...) {
			follower.market.FetchBook(t.Context(), p.id)
		}
	}
	if !waitUntil(10*time.Second, holdsReal) {
		t.Fatalf("after gossip and a book sync: the follower's book lacks a real offer. %s", realOffersAt(follower, boot, real))
	}
	waitFor(t, 20*time.Second, "the follower knows where the real providers listen", func() bool {
		for _, n := range real {
			if len(follower.host.Peerstore().Addrs(n.id)) == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range real {
		if follower.pricesFrom(n.id) {
			t.Fatalf("the follower counts %s before it verified anything of it", n.id)
		}
	}
	price := uint64(2_490_000)
	walk := []string{market.FormatPrice(price)}
	for range 4 {
		next := republish()
		walk = append(walk, market.FormatPrice(next))
		if next >= price || price-next > price/10+market.PriceTick/2 {
			t.Errorf("one re-publish took the price from %s to %s: want down, by at most 10%%", market.FormatPrice(price), market.FormatPrice(next))
		}
		price = next
	}
	t.Logf("beside three attested providers at 1.00 and %d made-up offers: %v", fakes, walk)
	if pr := follower.provider.Pricing(); pr == nil || pr.Tiers[0].Comparable != len(real) {
		t.Errorf("pricing %+v: want the %d attested offers alone", pr, len(real))
	}
	for _, n := range real {
		if !follower.challenger.Attested(n.id) {
			t.Errorf("the follower did not verify %s", n.id)
		}
	}
}

// realOffersAt says where the real providers' offers are, for a failure's
// message.
func realOffersAt(follower, boot *Node, real []*Node) string {
	var b strings.Builder
	for _, n := range real {
		_, atFollower := follower.market.Snapshot().Offer(n.id, offer.ProviderOfferID)
		_, atBoot := boot.market.Snapshot().Offer(n.id, offer.ProviderOfferID)
		_, published := n.provider.OwnOffer()
		fmt.Fprintf(&b, "%s: published %v, at boot %v, at the follower %v, connected to the follower %v, in boot's offers mesh %v; ",
			n.id, published, atBoot, atFollower, len(follower.host.Network().ConnsToPeer(n.id)) > 0, slices.Contains(boot.gossip.Mesh(p2p.TopicOffers), n.id))
	}
	fmt.Fprintf(&b, "the follower in boot's offers mesh %v; the follower's verdicts: %s; boot's: %s", slices.Contains(boot.gossip.Mesh(p2p.TopicOffers), follower.id), nonZeroVerdicts(follower), nonZeroVerdicts(boot))
	return b.String()
}
