package provider

import (
	"context"
	"log/slog"
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
	p := New(Deps{ID: peer.ID("provider"), Swarm: "public", Cfg: cfg, Store: dssync.MutexWrap(ds.NewMapDatastore()),
		Clock: clock.System(), Log: slog.Default(), RelayOnly: func() bool { return relayed }})
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
