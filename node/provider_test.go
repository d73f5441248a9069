package node

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Reload takes on the provider's terms at once, in a new offer, names
// what waits for a restart, and refuses an invalid configuration whole.
func TestReloadPublishesNewTermsAndNamesWhatWaits(t *testing.T) {
	t.Parallel()
	r := testRepo(t, "prov", asProvider("A100", 4, 80, "2.00", "DE"))
	n := startNode(t, r, Options{})
	waitFor(t, 10*time.Second, "the first offer", func() bool {
		o, ok := n.provider.OwnOffer()
		return ok && o.PriceMicros == 2_000_000
	})
	// The offer is in the provider's own book from its start, and is
	// gossiped once the offers topic has a peer or firstPeerWait has
	// passed (this node has no peer); a reload's offer comes after that
	// first publication, so the test waits for it, not for the clock.
	awaitMetric(t, n, `idlegrid_offers_published_total{kind="offer"}`, "counts the first publication", above(0))
	first, _ := n.provider.OwnOffer()
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Provider.Price = "1.50"
	cfg.Provider.Weekly = []string{"Sat 00:00-Sun 24:00"}
	cfg.Provider.MinRenterScore = 0.8 // the lease owner's: at the next start
	cfg.Network.ConnLow = 20
	res, err := n.Reload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, []string{"provider.price", "provider.weekly"}) {
		t.Errorf("applied %v, want provider.price and provider.weekly", res.Applied)
	}
	if !slices.Equal(res.NeedRestart, []string{"network.conn_low", "provider.min_renter_score"}) {
		t.Errorf("waiting for a restart: %v", res.NeedRestart)
	}
	waitFor(t, 10*time.Second, "an offer at the new price and windows", func() bool {
		o, ok := n.provider.OwnOffer()
		return ok && o.PriceMicros == 1_500_000 && len(o.Weekly) == 1 && o.Header.Seq > first.Header.Seq
	})

	bad := cfg
	bad.Provider.Price = "-3"
	if _, err := n.Reload(bad); err == nil || !strings.Contains(err.Error(), "provider.price") {
		t.Errorf("invalid price reloaded: %v", err)
	}
	if o, _ := n.provider.OwnOffer(); o.PriceMicros != 1_500_000 {
		t.Errorf("an invalid configuration changed the offer's price to %d", o.PriceMicros)
	}
}
