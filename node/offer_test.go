package node

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestBuildOfferIsAValidSignedOffer(t *testing.T) {
	key, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(key)
	c := config.DefaultConfig(config.ProfileProvider)
	asProvider("H100", 8, 80, "2.49", "DE")(&c)
	c.Provider.BronzePrice = "1.60"
	c.Provider.Weekly = []string{"Mon 18:00-Tue 08:00 floor 1.00", "Sat 00:00-Sun 24:00"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o, err := offer.Build(c.Provider, id, 7, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.DefaultLimits().ValidateOffer(o, now); err != nil {
		t.Fatalf("built offer is invalid: %v", err)
	}
	if o.MaxStartAheadSeconds != 7*24*3600 {
		t.Errorf("offer books %ds ahead; the config says a week", o.MaxStartAheadSeconds)
	}
	if o.PriceMicros != 2_490_000 || len(o.TierPrices) != 1 || o.TierPrices[0].MicrosPerGpuHour != 1_600_000 || len(o.Weekly) != 2 || o.Weekly[0].FloorMicros != 1_000_000 {
		t.Errorf("built offer: %v", o)
	}
	if _, err := market.Sign(key, o); err != nil {
		t.Fatal(err)
	}

	// Peak windows ask at least the price times the peak factor, and no
	// less than their own floor.
	c.Provider.Weekly = []string{"Mon 09:00-18:00 peak", "Tue 00:00-Wed 00:00", "Sat 00:00-Sun 24:00 floor 4.00 peak"}
	c.Provider.Pricing.PeakFactor = 1.25
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if o, err = offer.Build(c.Provider, id, 8, now); err != nil {
		t.Fatal(err)
	}
	if f := []uint64{o.Weekly[0].FloorMicros, o.Weekly[1].FloorMicros, o.Weekly[2].FloorMicros}; f[0] != 3_120_000 || f[1] != 0 || f[2] != 4_000_000 {
		t.Errorf("window floors %v, want 3.12 (2.49 × 1.25, up to a cent), none and 4.00", f)
	}
}
