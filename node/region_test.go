package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/geo"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

// geoMatrix is the RTTs between points by distance: fibre at 200 km a
// millisecond, on routes 1.6 times the great circle, plus a millisecond.
func geoMatrix(points []geo.Point) p2ptest.Matrix {
	m := make(p2ptest.Matrix, len(points))
	for i, a := range points {
		m[i] = make([]float64, len(points))
		for j, b := range points {
			if i != j {
				m[i][j] = 2*geo.DistanceKm(a, b)/geo.FibreKmPerMs*1.6 + 1
			}
		}
	}
	return m
}

// A provider in Germany that claims the United States is caught by a
// renter in Germany: the RTT it measures is below what light needs from
// Germany to any part of the US, so a bid that requires the US refuses
// the claim and says why; the honest providers in Germany and in the US
// are never flagged (issue 13).
func TestAClaimedRegionLightCannotReachIsRefused(t *testing.T) {
	t.Parallel()
	// boot in Frankfurt, an honest provider in Berlin, the liar in
	// Munich, an honest provider in Kansas City, the renter in Frankfurt.
	ms := newMockSwarmOn(t, geoMatrix([]geo.Point{{Lat: 50.11, Lon: 8.68}, {Lat: 52.52, Lon: 13.40}, {Lat: 48.14, Lon: 11.58}, {Lat: 39.10, Lon: -94.58}, {Lat: 50.0, Lon: 8.5}}), 1)
	fast := func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) }
	boot := startNode(t, testRepo(t, "boot", fast), ms.on(Options{}))
	provider := func(name, country string) *Node {
		return startNode(t, testRepo(t, name, both(bootstrapFrom(boot), fast, func(c *config.Config) {
			c.Provider.Enabled, c.Provider.Price, c.Provider.Country = true, "2.00", country
			c.Provider.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
		})), ms.on(Options{}))
	}
	berlin, liar, kansas := provider("berlin", "DE"), provider("liar", "US"), provider("kansas", "US")
	renter := startNode(t, testRepo(t, "renter", both(bootstrapFrom(boot), fast, func(c *config.Config) { c.Network.Location = "DE" })), ms.on(Options{Light: true}))
	waitFor(t, 30*time.Second, "the three offers, each provider's RTT measured", func() bool {
		for _, p := range []*Node{berlin, liar, kansas} {
			if _, ok := renter.coords.RTT(p.id); !ok || offeredGPUs(renter, p) != 8 {
				return false
			}
		}
		return true
	})
	if st := renter.Status(); st.Location != "DE" {
		t.Errorf("status location %q", st.Location)
	}
	offers, _ := renter.Offers(api.OfferQuery{})
	for _, o := range offers {
		flagged := o.Implausible != ""
		if flagged != (o.Provider == liar.id.String()) {
			t.Errorf("%s (%s, %.1fms): implausible %q", o.Provider, o.Country, o.RTTMillis, o.Implausible)
		}
	}

	us := api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, MaxPrice: "2.50", Regions: []string{"US"}}
	res, err := renter.Match(context.Background(), us)
	if err != nil || len(res.Candidates) != 1 || res.Candidates[0].Offer.Provider != kansas.id.String() {
		t.Fatalf("a bid for the US: %+v, %v; want the provider in Kansas only", res.Candidates, err)
	}
	// And says why the liar's offer does not fit.
	o, _ := renter.market.Snapshot().Offer(liar.id, offer.ProviderOfferID)
	alone := market.NewBook()
	alone.PutOffer(o, time.Now())
	ex := renter.market.Matcher.Explain(alone.Snapshot(), mustBid(t, renter, us), time.Now())
	if len(ex.Reasons) != 1 || ex.Reasons[0].Check != "claim" || !strings.Contains(ex.Reasons[0].Example, "country US implausible: measured") || !strings.Contains(ex.Reasons[0].Example, "light needs at least") {
		t.Errorf("the liar's offer, explained: %+v", ex)
	}
	t.Log(ex.Reasons[0].Example)
	de := us
	de.Regions = []string{"DE"}
	if res, err := renter.Match(context.Background(), de); err != nil || len(res.Candidates) != 1 || res.Candidates[0].Offer.Provider != berlin.id.String() {
		t.Errorf("a bid for DE: %+v, %v; want the provider in Berlin", res.Candidates, err)
	}
}

func mustBid(t *testing.T, n *Node, req api.BidRequest) *pb.Bid {
	t.Helper()
	b, err := buildBid(req, n.id, n.swarm, time.Now(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A renter that asks for latency trades price for nearness: a provider in
// Kansas City at 1.80 and one in Berlin at 2.00, seen from Frankfurt. With
// no latency weight the cheaper wins; with the default and with 5 the
// nearer does. A weight out of range is refused, naming the field.
func TestALatencyWeightTradesPriceForNearness(t *testing.T) {
	t.Parallel()
	ms := newMockSwarmOn(t, geoMatrix([]geo.Point{{Lat: 50.11, Lon: 8.68}, {Lat: 52.52, Lon: 13.40}, {Lat: 39.10, Lon: -94.58}, {Lat: 50.0, Lon: 8.5}}), 1)
	fast := func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) }
	boot := startNode(t, testRepo(t, "boot", fast), ms.on(Options{}))
	provider := func(name, country, price string) *Node {
		return startNode(t, testRepo(t, name, both(bootstrapFrom(boot), fast, func(c *config.Config) {
			c.Provider.Enabled, c.Provider.Price, c.Provider.Country = true, price, country
			c.Provider.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
		})), ms.on(Options{}))
	}
	berlin, kansas := provider("berlin", "DE", "2.00"), provider("kansas", "US", "1.80")
	renter := startNode(t, testRepo(t, "renter", both(bootstrapFrom(boot), fast)), ms.on(Options{Light: true}))
	waitFor(t, 30*time.Second, "both offers, both RTTs measured", func() bool {
		for _, p := range []*Node{berlin, kansas} {
			if _, ok := renter.coords.RTT(p.id); !ok || offeredGPUs(renter, p) != 8 {
				return false
			}
		}
		return true
	})
	first := func(w *float64) string {
		t.Helper()
		res, err := renter.Match(context.Background(), api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, MaxPrice: "2.50", LatencyWeight: w})
		if err != nil || len(res.Candidates) != 2 {
			t.Fatalf("weight %v: %+v, %v", w, res.Candidates, err)
		}
		return res.Candidates[0].Offer.Provider
	}
	zero, five := 0.0, 5.0
	if got := first(&zero); got != kansas.id.String() {
		t.Errorf("latency weight 0: first %s, want the cheaper (Kansas City)", got)
	}
	for _, w := range []*float64{nil, &five} {
		if got := first(w); got != berlin.id.String() {
			t.Errorf("latency weight %v: first %s, want the nearer (Berlin)", w, got)
		}
	}
	eleven := 11.0
	if _, err := renter.Match(context.Background(), api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, MaxPrice: "2.50", LatencyWeight: &eleven}); err == nil || !strings.Contains(err.Error(), "latency_weight 11: want 0 to 10") {
		t.Errorf("latency weight 11: %v", err)
	}
}
