package node

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A provider behind a NAT says so in its offer, and publishes it again
// when that changes (a relay reservation taken, a port mapped).
func TestAnOfferSaysWhenItsProviderIsReachedOnlyThroughRelays(t *testing.T) {
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.GPUs = []config.GPUConfig{{Model: "RTX 4090", Count: 1, VRAMGiB: 24, ComputeCapability: "8.9", Interconnect: "pcie"}}
	relayed := false
	p := newProvider(providerDeps{id: peer.ID("provider"), swarm: "public", cfg: cfg, store: dssync.MutexWrap(ds.NewMapDatastore()),
		clock: clock.System(), log: slog.Default(), relayOnly: func() bool { return relayed }})
	ctx := context.Background()
	o, err := p.buildOffer(ctx, cfg.GPUs, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if o.RelayOnly {
		t.Error("a directly reachable provider's offer says relay only")
	}
	p.current = o
	if p.reachMoved() {
		t.Error("nothing changed, yet the offer would be published again")
	}
	relayed = true
	if !p.reachMoved() {
		t.Error("reachable only through relays now, and the offer would not be published again")
	}
	if o, err = p.buildOffer(ctx, cfg.GPUs, nil, time.Now()); err != nil || !o.RelayOnly {
		t.Errorf("relayed provider's offer: relay_only %v (%v)", o.GetRelayOnly(), err)
	}
}

// Reload takes on the provider's terms at once, in a new offer, names
// what waits for a restart, and refuses an invalid configuration whole.
func TestReloadPublishesNewTermsAndNamesWhatWaits(t *testing.T) {
	t.Parallel()
	r := testRepo(t, "prov", asProvider("A100", 4, 80, "2.00", "DE"))
	n := startNode(t, r, Options{})
	waitFor(t, 10*time.Second, "the first offer", func() bool {
		o, ok := n.provider.ownOffer()
		return ok && o.PriceMicros == 2_000_000
	})
	// The offer is in the provider's own book from its start, and is
	// gossiped once the offers topic has a peer or firstPeerWait has
	// passed (this node has no peer); a reload's offer comes after that
	// first publication, so the test waits for it, not for the clock.
	awaitMetric(t, n, `idlegrid_offers_published_total{kind="offer"}`, "counts the first publication", above(0))
	first, _ := n.provider.ownOffer()
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
		o, ok := n.provider.ownOffer()
		return ok && o.PriceMicros == 1_500_000 && len(o.Weekly) == 1 && o.Header.Seq > first.Header.Seq
	})

	bad := cfg
	bad.Provider.Price = "-3"
	if _, err := n.Reload(bad); err == nil || !strings.Contains(err.Error(), "provider.price") {
		t.Errorf("invalid price reloaded: %v", err)
	}
	if o, _ := n.provider.ownOffer(); o.PriceMicros != 1_500_000 {
		t.Errorf("an invalid configuration changed the offer's price to %d", o.PriceMicros)
	}
}
