package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
)

// asProvider sells a group of GPUs at a price from a country.
func asProvider(model string, count, vram int, price, country string) func(*Config) {
	return func(c *Config) {
		c.Provider.Enabled = true
		c.Provider.GPUs = []GPUConfig{{Model: model, Count: count, VRAMGiB: vram, ComputeCapability: "8.0", Interconnect: "pcie"}}
		c.Provider.Price = price
		c.Provider.Country = country
	}
}

func both(fs ...func(*Config)) func(*Config) {
	return func(c *Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

func bookHolds(n *Node, want int) func() bool {
	return func() bool {
		offers, err := n.Offers(api.OfferQuery{})
		return err == nil && len(offers) == want
	}
}

func TestMarketAcrossNodes(t *testing.T) {
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	cheap := startNode(t, testRepo(t, "cheap", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.10", "DE"))), Options{})
	dear := startNode(t, testRepo(t, "dear", both(bootstrapFrom(boot), asProvider("A100", 8, 80, "2.20", "FR"))), Options{})
	renter := startNode(t, testRepoWith(t, "renter", InitOptions{Profile: ProfileRenter}, bootstrapFrom(boot)), Options{})
	all := []*Node{boot, cheap, dear, renter}
	for _, n := range all {
		waitFor(t, 15*time.Second, "every book holds both offers", bookHolds(n, 2))
	}

	// Filters and sorting.
	offers, err := renter.Offers(api.OfferQuery{Country: "de"})
	if err != nil || len(offers) != 1 || offers[0].Provider != cheap.Host().ID().String() || offers[0].Price != "1.10" {
		t.Errorf("offers in DE: %+v, %v", offers, err)
	}
	offers, _ = renter.Offers(api.OfferQuery{MaxPrice: "2.00"})
	if len(offers) != 1 {
		t.Errorf("offers at most 2.00: %d, want 1", len(offers))
	}
	if _, err := renter.Offers(api.OfferQuery{MaxPrice: "cheap"}); err == nil {
		t.Error("a bad max_price was accepted")
	}

	// The matcher ranks the cheaper provider first and says why nothing
	// fits a request no one can meet.
	res, err := renter.Match(context.Background(), api.BidRequest{GPUs: []string{"A100"}, Count: 2, Hours: 4, Tier: "silver", MaxPrice: "3.00"})
	if err != nil || len(res.Candidates) != 2 || res.Candidates[0].Offer.Provider != cheap.Host().ID().String() {
		t.Fatalf("match: %+v, %v", res, err)
	}
	if got := res.Candidates[0].Total; got != "8.80" {
		t.Errorf("total for 2 A100 × 4 h at 1.10 = %s, want 8.80", got)
	}
	res, err = renter.Match(context.Background(), api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, Tier: "silver", MaxPrice: "3.00"})
	if err != nil || len(res.Candidates) != 0 || !strings.Contains(res.Explanation, "2 offers") {
		t.Errorf("an unmeetable match: %+v, %v", res, err)
	}

	// A bid gossiped to the swarm comes back with a signed quote from each
	// provider whose offer fits it.
	bid, err := renter.PlaceBid(context.Background(), api.BidRequest{GPUs: []string{"A100"}, Count: 4, Hours: 1, Tier: "silver", MaxPrice: "3.00", WaitMillis: 2000})
	if err != nil {
		t.Fatal(err)
	}
	providers := map[string]bool{}
	for _, q := range bid.Quotes {
		providers[q.Provider] = true
	}
	if len(bid.Quotes) != 2 || !providers[cheap.Host().ID().String()] || !providers[dear.Host().ID().String()] {
		t.Errorf("quotes: %+v", bid.Quotes)
	}

	// A node that restarts (its book lives in memory, its sequence numbers
	// on disk) takes the offers back by syncing.
	renterRepo := renter.repo
	renter.Close()
	renter = startNode(t, renterRepo, Options{})
	waitFor(t, 15*time.Second, "the restarted renter's book holds both offers again", bookHolds(renter, 2))

	// A node that joins late gets the whole book by syncing, without
	// waiting for a re-publication.
	late := startNode(t, testRepo(t, "late", bootstrapFrom(boot)), Options{})
	waitFor(t, 15*time.Second, "the late node's book holds both offers", bookHolds(late, 2))

	// A provider that stops withdraws its offer from every book.
	dear.Close()
	for name, n := range map[string]*Node{"boot": boot, "cheap": cheap, "renter": renter, "late": late} {
		waitFor(t, 15*time.Second, name+" drops the withdrawn offer", bookHolds(n, 1))
	}
}

func TestProviderRestartIsNotStale(t *testing.T) {
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	r := testRepo(t, "prov", both(bootstrapFrom(boot), asProvider("L40S", 2, 48, "0.80", "NL")))
	prov := startNode(t, r, Options{})
	waitFor(t, 15*time.Second, "the offer reaches the bootstrap node", bookHolds(boot, 1))
	first, _ := boot.Offers(api.OfferQuery{})
	prov.Close()
	waitFor(t, 15*time.Second, "the withdrawal reaches the bootstrap node", bookHolds(boot, 0))
	startNode(t, r, Options{})
	waitFor(t, 15*time.Second, "the restarted provider's offer is taken", bookHolds(boot, 1))
	again, _ := boot.Offers(api.OfferQuery{})
	if again[0].Seq <= first[0].Seq {
		t.Errorf("restarted provider's seq %d is not above %d", again[0].Seq, first[0].Seq)
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
	if !b.allow(t0.Add(time.Hour)) || !b.allow(t0.Add(time.Hour)) || !b.allow(t0.Add(time.Hour)) || b.allow(t0.Add(time.Hour)) {
		t.Error("after a long quiet the burst is not back to 3, or exceeds it")
	}
}
