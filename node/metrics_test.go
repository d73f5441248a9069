package node

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/metricstest"
	"github.com/idlegrid/idlegrid/p2p"
)

// idlegridFamilies are the families of idlegrid's own that every node
// serves, whatever its role, from its start.
var idlegridFamilies = []string{
	"idlegrid_info", "idlegrid_uptime_seconds", "idlegrid_connected_peers", "idlegrid_conn_evictions_total", "idlegrid_dht_routing_table_peers",
	"idlegrid_gossip_mesh_peers", "idlegrid_gossip_messages_received_total", "idlegrid_gossip_router_reconnects_total", "idlegrid_validator_messages_total",
	"idlegrid_offers_held", "idlegrid_bids_held", "idlegrid_offers_published_total", "idlegrid_quotes_sent_total", "idlegrid_bids_unquoted_total",
	"idlegrid_attestations_served_total", "idlegrid_attestation_challenges_total",
	"idlegrid_gpus_offered", "idlegrid_gpus_leased", "idlegrid_leases_running", "idlegrid_leases_ended_total", "idlegrid_lease_metered_seconds_total",
	"idlegrid_earnings_total", "idlegrid_spending_total", "idlegrid_executor_errors_total", "idlegrid_vouchers_total",
	"idlegrid_reputation_reliability", "idlegrid_coordinate_error", "idlegrid_coordinate_outliers_total",
}

// scrape reads n's /metrics as a Prometheus configured with the node's
// API token would.
func scrape(t *testing.T, n *Node) metricstest.Scrape {
	t.Helper()
	return metricstest.Read(t, n.APIAddr(), apiToken(t, n))
}

// awaitMetric scrapes n until series satisfies cond.
func awaitMetric(t *testing.T, n *Node, series, what string, cond func(float64) bool) {
	t.Helper()
	waitFor(t, 20*time.Second, series+" "+what, func() bool { return cond(scrape(t, n).Value(t, series)) })
}

func above(v float64) func(float64) bool   { return func(x float64) bool { return x > v } }
func exactly(v float64) func(float64) bool { return func(x float64) bool { return x == v } }

// A provider's and a renter's /metrics carry, from the start, every
// family an operator graphs (the example Grafana dashboard's), and each
// moves when its event happens: an offer published and re-published, a
// bid quoted, a message the validator rejects, an image the engine fails
// to pull, a rental attested, run on two of eight GPUs and cancelled,
// settled as earnings on one side and spending on the other.
func TestMetricsMoveWhenTheirEventsHappen(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) })
	ctx := context.Background()
	for name, n := range map[string]*Node{"provider": prov, "renter": renter} {
		s := scrape(t, n)
		for _, f := range idlegridFamilies {
			if _, ok := s.Families[f]; !ok {
				t.Errorf("the %s's /metrics lacks %s", name, f)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	const (
		published      = `idlegrid_offers_published_total{kind="offer"}`
		acceptedOffers = `idlegrid_validator_messages_total{reason="ok",result="accept",topic="offers"}`
		acceptedBids   = `idlegrid_validator_messages_total{reason="ok",result="accept",topic="bids"}`
		garbage        = `idlegrid_validator_messages_total{reason="signature",result="reject",topic="offers"}`
		bidsSeen       = `idlegrid_gossip_messages_received_total{topic="bids"}`
		quotes         = `idlegrid_quotes_sent_total`
		pullErrors     = `idlegrid_executor_errors_total{op="pull"}`
		served         = `idlegrid_attestations_served_total{result="ok"}`
		verified       = `idlegrid_attestation_challenges_total{result="verified"}`
		earned         = `idlegrid_earnings_total{currency="USD"}`
		spent          = `idlegrid_spending_total{currency="USD"}`
		reliability    = `idlegrid_reputation_reliability_sum`
	)

	// The provider's first offer, in the renter's book; then a new price,
	// published at once.
	awaitMetric(t, prov, published, "counts the first offer", above(0))
	awaitMetric(t, renter, "idlegrid_offers_held", "holds the provider's offer", exactly(1))
	p, r := scrape(t, prov), scrape(t, renter)
	cfg := prov.cfg
	cfg.Provider.Price = "2.10"
	if _, err := prov.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	awaitMetric(t, prov, published, "counts the re-publication", above(p.Value(t, published)))
	awaitMetric(t, renter, acceptedOffers, "counts the new offer accepted", above(r.Value(t, acceptedOffers)))

	// A bid, quoted by the provider, while the renter gossips garbage and
	// names the provider an image no registry has.
	bid := make(chan api.BidResult, 1)
	go func() {
		res, err := renter.PlaceBid(ctx, api.BidRequest{GPUs: []string{"H100"}, Count: 2, Hours: 1, Tier: "silver", MaxPrice: "2.50", WaitMillis: 3000})
		if err != nil {
			t.Errorf("bid: %v", err)
		}
		bid <- res
	}()
	if err := renter.link.Publish(ctx, p2p.TopicOffers, []byte("garbage")); err == nil {
		t.Error("the renter published garbage")
	}
	if got := scrape(t, renter).Value(t, garbage); got != r.Value(t, garbage)+1 {
		t.Errorf("%s = %v after garbage, want %v", garbage, got, r.Value(t, garbage)+1)
	}
	if _, err := renter.link.ReadyImage(ctx, prov.id, "registry.invalid/idlegrid/nope:1", 10*time.Second, nil); err == nil {
		t.Error("the provider readied an image no registry has")
	}
	awaitMetric(t, prov, pullErrors, "counts the failed pull", exactly(p.Value(t, pullErrors)+1))
	awaitMetric(t, prov, "idlegrid_bids_held", "holds the bid", exactly(1))
	awaitMetric(t, prov, bidsSeen, "counts the bid", above(p.Value(t, bidsSeen)))
	awaitMetric(t, prov, quotes, "counts the quote", exactly(p.Value(t, quotes)+1))
	awaitMetric(t, renter, acceptedBids, "counts its own bid", above(r.Value(t, acceptedBids)))
	if res := <-bid; len(res.Quotes) != 1 {
		t.Errorf("the bid got %d quotes, want the provider's", len(res.Quotes))
	}

	// A rental: attested, run on 2 of the 8 GPUs for a metered second or
	// more, then cancelled.
	var out executortest.Buffer
	done := rentAsync(ctx, renter, rentRequest(image, "sh", "-c", "echo up; sleep 300"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "up", firstOutputWait)
	awaitMetric(t, prov, "idlegrid_gpus_leased", "holds the leased GPUs", exactly(2))
	if got := scrape(t, prov).Value(t, "idlegrid_gpus_offered"); got != 8 {
		t.Errorf("idlegrid_gpus_offered = %v, want 8", got)
	}
	awaitMetric(t, prov, served, "counts the attestation", above(p.Value(t, served)))
	awaitMetric(t, renter, verified, "counts the challenge", above(r.Value(t, verified)))
	waitFor(t, 10*time.Second, "the lease metered a second", func() bool { return activeLease(t, prov).Beats >= 7 })
	if _, err := renter.CancelLease(ctx, activeLease(t, prov).ID); err != nil {
		t.Fatal(err)
	}
	if d := rentEnded(t, done); d.err != nil {
		t.Fatalf("rent: %v", d.err)
	}
	awaitMetric(t, prov, `idlegrid_leases_ended_total{role="provider",state="cancelled"}`, "counts the end", exactly(1))
	awaitMetric(t, renter, `idlegrid_leases_ended_total{role="renter",state="cancelled"}`, "counts the end", exactly(1))
	awaitMetric(t, prov, "idlegrid_gpus_leased", "frees the GPUs", exactly(0))
	awaitMetric(t, prov, earned, "counts the earnings", above(p.Value(t, earned)))
	awaitMetric(t, renter, spent, "counts the spending", above(r.Value(t, spent)))
	awaitMetric(t, renter, reliability, "rescores the provider", func(v float64) bool { return v != r.Value(t, reliability) })
	// The coordinate's error is Vivaldi's own estimate, which loopback RTTs
	// on a loaded machine (0.1 ms, then 50 ms) may hold at its cap: what
	// the metric guarantees is that it reports the coordinate's error once
	// RTTs come in.
	waitFor(t, 20*time.Second, "the provider's coordinate takes RTT samples", func() bool { return prov.coords.Stats().Samples >= 3 })
	awaitMetric(t, prov, "idlegrid_coordinate_error", "is the coordinate's own error", func(v float64) bool { return v == prov.coords.Error() })
}
