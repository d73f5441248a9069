package provider

import (
	"bytes"
	"context"
	"log/slog"
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

// A provider that sells nothing says so once for each reason, loudly,
// and once that it sells again: its log is where its owner looks, and a
// line every watch interval would bury the rest.
func TestAProviderSaysOnceForEachReasonItSellsNothing(t *testing.T) {
	var logged bytes.Buffer
	p := New(Deps{ID: peer.ID("provider"), Swarm: "public", Cfg: config.DefaultConfig(config.ProfileProvider).Provider,
		Store: dssync.MutexWrap(ds.NewMapDatastore()), Clock: clock.System(), Log: slog.New(slog.NewTextHandler(&logged, nil))})
	for _, why := range []string{"no GPUs to sell: no NVIDIA driver", "no GPUs to sell: no NVIDIA driver", "", "", "no GPU sellable now: GPU 0 busy", "no GPU sellable now: GPU 0 busy"} {
		p.sellsNothing(why)
	}
	got := logged.String()
	if n := strings.Count(got, "level=WARN msg=\"this provider sells nothing\""); n != 2 {
		t.Errorf("warned %d times for two reasons:\n%s", n, got)
	}
	if n := strings.Count(got, "this provider sells again"); n != 1 {
		t.Errorf("said %d times that it sells again:\n%s", n, got)
	}
	if !strings.Contains(got, "GPU 0 busy") || !strings.Contains(got, "no NVIDIA driver") {
		t.Errorf("the reasons are not in the log:\n%s", got)
	}
}
