package node

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
)

// followsMarket prices at the median of the comparable offers, within
// 0.50 to 9.00, re-publishing every 45 s of (fake) time.
func followsMarket(c *config.Config) {
	c.Provider.Pricing = config.PricingConfig{Policy: config.PolicyMarket, Percentile: 50, Floor: "0.50", Ceiling: "9.00", PeakFactor: 1}
	c.Provider.OfferTTL = config.Dur(time.Minute)
}

// attestable sells the GPUs of a fake DGX A100 (go-nvml's mock), which a
// challenge can verify, instead of GPUs listed by hand.
func attestable(c *config.Config) { c.Provider.GPUSource = "fake:dgxa100" }

// TestPolicyPricedProvidersSettleBesideAFixedOne runs two providers that
// price at the median of the comparable offers in their books and one at
// a fixed 2.00, all selling the same model on GPUs the others verify
// before they price, through rounds of re-publishing on a shared fake clock, on
// loopback and on mocknet with PlanetLab latencies. The policy prices
// settle within two cents of 2.00, each crossing it at most once on the
// way (an oscillation crosses again and again), and then stay put.
func TestPolicyPricedProvidersSettleBesideAFixedOne(t *testing.T) {
	t.Parallel()
	forEachNet(t, testPolicyPricedProvidersSettle)
}

func testPolicyPricedProvidersSettle(t *testing.T, net testNet) {
	clk := clock.NewFake()
	log := keepLog(t)
	boot := startNode(t, testRepo(t, "boot", nil), net.on(Options{Clock: clk, Logger: log.node("boot")}))
	const model = "A100 SXM 80GB"
	dear := startNode(t, testRepo(t, "dear", both(bootstrapFrom(boot), asProvider(model, 8, 80, "3.00", "DE"), attestable, followsMarket)), net.on(Options{Clock: clk, Logger: log.node("dear")}))
	cheap := startNode(t, testRepo(t, "cheap", both(bootstrapFrom(boot), asProvider(model, 8, 80, "1.50", "FR"), attestable, followsMarket)), net.on(Options{Clock: clk, Logger: log.node("cheap")}))
	fixed := startNode(t, testRepo(t, "fixed", both(bootstrapFrom(boot), asProvider(model, 8, 80, "2.00", "NL"), attestable, func(c *config.Config) {
		c.Provider.OfferTTL = config.Dur(time.Minute)
	})), net.on(Options{Clock: clk, Logger: log.node("fixed")}))
	providers := []*Node{dear, cheap, fixed}
	for _, n := range append(providers, boot) {
		waitFor(t, 15*time.Second, "every book holds the three offers", bookHolds(n, 3))
	}
	// Each round prices from the others' offers as gossip brings them:
	// every node in a mesh on every topic first (sync alone brought the
	// first offers).
	waitFor(t, 15*time.Second, "every node in a mesh on every topic", meshOnEveryTopic(append(providers, boot)))
	own := func(n *Node) (seq, price uint64) {
		o, ok := n.provider.OwnOffer()
		if !ok {
			return 0, 0
		}
		return o.Header.Seq, o.PriceMicros
	}
	// Where a book lacks a new offer, say which offers each book holds
	// and over how many connections.
	defer func() {
		if !t.Failed() {
			return
		}
		name := map[*Node]string{dear: "dear", cheap: "cheap", fixed: "fixed"}
		for _, n := range providers {
			for _, q := range providers {
				seq, _ := own(q)
				var have uint64
				if o, ok := n.market.Snapshot().Offer(q.id, offer.ProviderOfferID); ok {
					have = o.Header.Seq
				}
				t.Logf("%s (%s) holds %s's (%s) offer seq %d of %d, over %d connections", name[n], n.id, name[q], q.id, have, seq, len(n.host.Network().ConnsToPeer(q.id)))
			}
			t.Logf("%s's offers mesh: %v", name[n], n.gossip.Mesh(p2p.TopicOffers))
		}
	}()
	hist := map[*Node][]uint64{}
	for _, n := range providers {
		_, price := own(n)
		hist[n] = []uint64{price}
	}
	// Apart, each moves half way to its target, by at most a tenth of its
	// price (provider.pricing.max_step): the gap to 2.00 shrinks by a
	// tenth of the price a round while it is wide, then by a quarter a
	// round where both move at once, by half where they move in turn; 22
	// rounds close a gap of a few dollars to a cent.
	for round := 1; round <= 22; round++ {
		var before [3]uint64
		for i, n := range providers {
			before[i], _ = own(n)
		}
		clk.Advance(46 * time.Second) // past three quarters of the offers' TTL: each re-publishes
		waitFor(t, 15*time.Second, "each provider re-publishes", func() bool {
			for i, n := range providers {
				if seq, _ := own(n); seq <= before[i] {
					return false
				}
			}
			return true
		})
		// The next round prices from books that hold every new offer.
		waitFor(t, 15*time.Second, "every provider's book holds every new offer", func() bool {
			for _, n := range providers {
				snap := n.market.Snapshot()
				for _, q := range providers {
					seq, _ := own(q)
					if o, ok := snap.Offer(q.id, offer.ProviderOfferID); !ok || o.Header.Seq < seq {
						return false
					}
				}
			}
			return true
		})
		for _, n := range providers {
			_, price := own(n)
			hist[n] = append(hist[n], price)
		}
		t.Logf("round %d: dear %s, cheap %s, fixed %s", round, market.FormatPrice(hist[dear][round]), market.FormatPrice(hist[cheap][round]), market.FormatPrice(hist[fixed][round]))
	}
	const at = 2_000_000
	for name, n := range map[string]*Node{"dear": dear, "cheap": cheap} {
		h := hist[n]
		last := h[len(h)-1]
		if last > at+2*market.PriceTick || last < at-2*market.PriceTick {
			t.Errorf("%s settled at %s beside a fixed 2.00: %v", name, market.FormatPrice(last), h)
		}
		for _, p := range h[len(h)-3:] {
			if p != last {
				t.Errorf("%s still moves: %v", name, h)
				break
			}
		}
		crossings := 0
		for j := 1; j < len(h); j++ {
			if (h[j-1] < at) != (h[j] < at) && h[j] != at && h[j-1] != at {
				crossings++
			}
		}
		if crossings > 1 {
			t.Errorf("%s crossed the market %d times: %v", name, crossings, h)
		}
		if pr := n.provider.Pricing(); pr == nil || pr.Policy != config.PolicyMarket || len(pr.Tiers) == 0 || pr.Tiers[0].Comparable != 2 {
			t.Errorf("%s's pricing: %+v, want the market policy over 2 comparable offers", name, pr)
		}
	}
	if h := hist[fixed]; h[len(h)-1] != at {
		t.Errorf("the fixed provider's price moved: %v", h)
	}
}

// TestARepriceLeavesTheAgreedLeaseAlone: a provider that follows the
// market re-prices while a lease runs (three cheaper providers appear,
// and a reload re-publishes once it verified them): the offer moves toward their
// median by a tenth (half way, bounded by provider.pricing.max_step),
// the lease is billed at the price it was agreed at, and the provider's
// status says the price, what the policy would set, the GPU-hours leased
// and the day's earnings.
func TestARepriceLeavesTheAgreedLeaseAlone(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *config.Config) {
		c.Provider.Pricing = config.PricingConfig{Policy: config.PolicyMarket, Percentile: 50, Floor: "0.50", Ceiling: "9.00", PeakFactor: 1}
	})
	waitFor(t, 15*time.Second, "the provider's first offer", func() bool { _, ok := prov.provider.OwnOffer(); return ok })
	done := rentAsync(context.Background(), renter, rentRequest(image, "sleep", "4"), RentOutput{})
	waitFor(t, 30*time.Second, "the lease runs", func() bool {
		st := prov.Status().Leases
		return len(st.Active) == 1 && st.Active[0].State == views.LeaseActive
	})

	// Three cheaper H100 machines appear in the book; a reload of the
	// policy re-publishes, once the provider verified their attestations,
	// priced a tenth of the way from 2.00 to their 1.00 (half way, within
	// max_step).
	for _, name := range []string{"c1", "c2", "c3"} {
		startNode(t, testRepo(t, name, both(bootstrapFrom(prov), func(c *config.Config) {
			c.Provider.Enabled, c.Provider.GPUSource, c.Provider.Price = true, "fake:dgxh100", "1.00"
		})), Options{})
	}
	waitFor(t, 15*time.Second, "the provider's book holds the three", bookHolds(prov, 4))
	full, err := prov.repo.Config()
	if err != nil {
		t.Fatal(err)
	}
	full.Provider.Pricing.Percentile = 49
	if _, err := prov.Reload(full); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the offer re-priced to 1.80", func() bool {
		o, ok := prov.provider.OwnOffer()
		return ok && o.PriceMicros == 1_800_000
	})

	r := rentEnded(t, done)
	if r.err != nil {
		t.Fatalf("rent: %v", r.err)
	}
	rc := r.res.Receipt
	if r.res.Lease.Price != "2.00" || rc.Amount != market.FormatPrice(market.LeaseTotal(2_000_000, 2, rc.MeteredSeconds)) {
		t.Errorf("lease at %s, receipt %s for %d s: want the agreed 2.00", r.res.Lease.Price, rc.Amount, rc.MeteredSeconds)
	}
	waitFor(t, 10*time.Second, "the provider holds the receipt", func() bool { return prov.Status().Leases.Ended == 1 })
	p := prov.Status().Pricing
	if p == nil || p.Policy != config.PolicyMarket || len(p.Tiers) == 0 {
		t.Fatalf("pricing status: %+v", p)
	}
	var silver api.TierPriceStatus
	for _, ts := range p.Tiers {
		if ts.Tier == "silver" {
			silver = ts
		}
	}
	if silver.Price != "1.80" || silver.WouldSet != "1.00" || silver.Comparable != 3 {
		t.Errorf("silver: %+v, want 1.80 now, 1.00 the policy's, from 3 offers", silver)
	}
	if len(p.Fill) != 1 || p.Fill[0].Window != "always" || p.Fill[0].LeasedHours <= 0 || p.Fill[0].OfferedHours <= p.Fill[0].LeasedHours {
		t.Errorf("fill: %+v", p.Fill)
	}
	if last := p.EarnedPerDay[len(p.EarnedPerDay)-1]; last.Amount != rc.Amount {
		t.Errorf("earned today %s, the receipt %s", last.Amount, rc.Amount)
	}
}
