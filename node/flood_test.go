package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// flooder is an attacker's host in n's swarm whose gossip checks nothing
// it sends, connected to each of to.
func flooder(t *testing.T, to ...*Node) (host.Host, *p2p.Gossip) {
	t.Helper()
	ctx := context.Background()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	g, err := p2p.NewGossip(ctx, h, p2p.GossipConfig{Swarm: to[0].Swarm(), OutboundQueue: 4096, MaxMessageSize: 1 << 20, ValidatorTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	for _, n := range to {
		if err := h.Connect(ctx, peer.AddrInfo{ID: n.id, Addrs: n.host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	return h, g
}

// spam signs, for each of keys fresh keys, perKey valid offers and bids
// (each under its own ID) that fit what rentRequest asks of a provider
// selling H100s at 2.00: what a flood at issue 11's rates is made of.
func spam(t *testing.T, sw p2p.Swarm, keys, perKey int) (offers, bids [][]byte) {
	t.Helper()
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.Price = "1.00"
	cfg.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0"}}
	now := time.Now()
	for range keys {
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		for range perKey {
			o, err := offer.Build(cfg, id, 1, now)
			if err != nil {
				t.Fatal(err)
			}
			o.Header.Id, o.Header.Swarm = newID("o-"), sw.Tag()
			b, err := buildBid(rentRequest("idlegrid-test/busybox:1", "true").BidRequest, id, sw, now, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			oe, err := market.Sign(key, o)
			if err != nil {
				t.Fatal(err)
			}
			be, err := market.Sign(key, b)
			if err != nil {
				t.Fatal(err)
			}
			offers, bids = append(offers, oe), append(bids, be)
		}
	}
	return offers, bids
}

// An honest renter gets its quotes and completes a rental while a peer
// floods the swarm with valid offers and bids of 50 free keys (issue 11,
// attack 5: a bid flood left an honest renter with 0 quotes in 5 of 5
// tries). The flood runs throughout; every try of the renter's gets the
// provider's quote, and the rental runs. The flooder is connected to
// both, or to the renter alone, so that every bid of the flood reaches
// the provider relayed by the renter whose own bids it must not crowd out.
func TestAnHonestRenterGetsQuotesAndRentsThroughAFlood(t *testing.T) {
	t.Parallel()
	for _, through := range []string{"beside", "through the renter"} {
		t.Run(through, func(t *testing.T) {
			t.Parallel()
			rentThroughAFlood(t, through == "through the renter")
		})
	}
}

func rentThroughAFlood(t *testing.T, throughRenter bool) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	bidder := startNode(t, testRepoWith(t, "bidder", repo.InitOptions{Profile: config.ProfileRenter}, bootstrapFrom(prov)), Options{})
	waitFor(t, 15*time.Second, "the provider's offer in both renters' books", func() bool {
		return offeredGPUs(renter, prov) == 8 && offeredGPUs(bidder, prov) == 8
	})
	flooded := []*Node{prov, bidder}
	if throughRenter {
		flooded = []*Node{bidder}
	}
	_, g := flooder(t, flooded...)
	offers, bids := spam(t, prov.Swarm(), 50, 80)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent atomic.Int64
	start := time.Now()
	defer func() {
		cancel()
		wg.Wait()
		t.Logf("the flood: %d offers and bids in %s (%.0f a second)", sent.Load(), time.Since(start).Round(time.Millisecond), float64(sent.Load())/time.Since(start).Seconds())
	}()
	wg.Add(1)
	go func() { // the flood, round and round, until the test ends
		defer wg.Done()
		for ctx.Err() == nil {
			for i := range bids {
				g.Topic(p2p.TopicBids).Publish(ctx, bids[i])
				g.Topic(p2p.TopicOffers).Publish(ctx, offers[i])
				if ctx.Err() != nil {
					return
				}
				sent.Add(2)
			}
		}
	}()
	v := prov.market.Validator
	if throughRenter {
		// Each of the flood's bids reaches the provider relayed by the
		// renter, as many as the renter's budget for the flooder lets
		// through: more than the provider can quote, so the lane of bids
		// the renter relays is full.
		full := prov.metrics.BidsUnquoted.WithLabelValues(metrics.UnquotedQueueFull)
		waitFor(t, 20*time.Second, "the flood fills the renter's relay lane at the provider", func() bool { return testutil.ToFloat64(full) > 0 })
	} else {
		waitFor(t, 20*time.Second, "the flood reaches the provider", func() bool { return v.Accepted.Load()+v.Ignored.Load() > 500 })
	}

	req := rentRequest(image, "true").BidRequest
	req.WaitMillis = 2_000
	for try := range 3 {
		res, err := bidder.PlaceBid(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, q := range res.Quotes {
			got = got || q.Provider == prov.id.String()
		}
		if !got {
			t.Errorf("try %d: %d quotes, none from the provider; the provider's %s", try, len(res.Quotes), quoteAccount(prov, bidder))
		}
	}
	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil || res.Lease.Provider != prov.id.String() || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("rent through the flood: %v (%s, %s)", err, res.Lease.Provider, res.Receipt.Outcome)
	}
	if n := prov.market.Snapshot().Len(); n > 1+p2p.IssuerCaps[p2p.TopicOffers]*50 {
		t.Errorf("the provider's book holds %d offers", n)
	}
}
