package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/metricstest"
	"github.com/idlegrid/idlegrid/node/repo"
)

// idlegridFamilies are the families every node serves on /metrics.
var idlegridFamilies = []string{
	"idlegrid_attestation_challenges_total", "idlegrid_attestations_served_total", "idlegrid_bids_held", "idlegrid_bids_unquoted_total",
	"idlegrid_conn_evictions_total", "idlegrid_connected_peers", "idlegrid_coordinate_error", "idlegrid_coordinate_outliers_total", "idlegrid_dht_routing_table_peers",
	"idlegrid_earnings_total", "idlegrid_executor_errors_total", "idlegrid_gossip_mesh_peers", "idlegrid_gossip_messages_received_total", "idlegrid_gossip_router_reconnects_total",
	"idlegrid_gpus_leased", "idlegrid_gpus_offered", "idlegrid_info", "idlegrid_lease_metered_seconds_total", "idlegrid_leases_ended_total",
	"idlegrid_leases_running", "idlegrid_offers_held", "idlegrid_offers_published_total", "idlegrid_quotes_sent_total",
	"idlegrid_reputation_reliability", "idlegrid_spending_total", "idlegrid_uptime_seconds", "idlegrid_validator_messages_total", "idlegrid_vouchers_total",
}

// A running devstack's nodes serve every family on their APIs, and its
// demo rental moves the provider's: an offer published, an attestation
// served, a lease ended, its earnings; and the other node's book holds the
// offer its validator accepted.
func TestDevstackServesEveryMetricAndItsDemoMovesThem(t *testing.T) {
	executortest.BusyboxImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"devstack", "--nodes", "2", "--demo"}, func(string) string { return "" }, &out, &errb)
	}()
	defer func() { cancel(); <-done }()
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case code := <-done:
				done <- code
				t.Fatalf("devstack exited %d before %s:\n%s\n%s", code, what, out.String(), errb.String())
			case <-ctx.Done():
				t.Fatalf("no %s within 90 s:\n%s", what, out.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	var dir string
	wait("its folder", func() bool {
		_, rest, ok := strings.Cut(out.String(), " nodes in ")
		if ok {
			fmt.Sscanf(rest, "%s", &dir)
			dir = strings.TrimSuffix(dir, ",")
		}
		return ok && dir != ""
	})
	wait("the demo's receipt", func() bool { return strings.Contains(out.String(), "signed by renter and provider") })

	type api struct{ addr, token string }
	var nodes []api
	for i := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("node%02d", i))
		b, err := os.ReadFile(filepath.Join(path, repo.APIFile))
		if err != nil {
			t.Fatal(err)
		}
		r, err := repo.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		token, err := r.APIToken()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, api{strings.TrimSpace(string(b)), token})
	}
	var provider, other metricstest.Scrape
	for i, n := range nodes {
		s := metricstest.Read(t, n.addr, n.token)
		for _, f := range idlegridFamilies {
			if _, ok := s.Families[f]; !ok {
				t.Errorf("node %d serves no %s", i, f)
			}
		}
		if s.Samples["idlegrid_gpus_offered"] > 0 {
			provider = s
		} else {
			other = s
		}
	}
	if provider.Samples == nil || other.Samples == nil {
		t.Fatalf("no provider and other node among the devstack's two")
	}
	sum := func(s metricstest.Scrape, prefix string) float64 {
		total := 0.0
		for k, v := range s.Samples {
			if strings.HasPrefix(k, prefix) {
				total += v
			}
		}
		return total
	}
	for _, c := range []struct {
		s      metricstest.Scrape
		series string
	}{
		{provider, `idlegrid_offers_published_total{kind="offer"}`},
		{provider, `idlegrid_attestations_served_total{result="ok"}`},
		{provider, `idlegrid_earnings_total{currency="USD"}`},
		{provider, `idlegrid_leases_ended_total{role="provider"`},
		{provider, `idlegrid_lease_metered_seconds_total{role="provider"}`},
		{other, `idlegrid_offers_held`},
		{other, `idlegrid_validator_messages_total{reason="ok",result="accept",topic="offers"}`},
	} {
		if v := sum(c.s, c.series); v <= 0 {
			t.Errorf("%s is %v after the demo's rental", c.series, v)
		}
	}
}
