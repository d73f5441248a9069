package node

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/p2p"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Among offers equal in all but where they are, the nearest wins, for a
// light renter that has measured none of them: on mocknet with PlanetLab
// latencies, 8 providers at one price publish their network coordinates
// in their offers, and a renter ranks them by the RTT its coordinate and
// theirs estimate (issue 13). What the code guarantees is the ranking by
// the RTTs the renter knows (measured, or estimated from the offers'
// coordinates, or measured first by a fresh renter), and that max_rtt
// keeps out what it knows to lie beyond; how near those figures are to
// the truth depends on the machine's load as much as on the code, and
// BenchmarkNearestOfFiftyProviders and
// BenchmarkCoordinatesConvergeOnPlanetLab (p2p) measure it.
func TestTheNearestOfEqualOffersWinsByEstimatedRTT(t *testing.T) {
	t.Parallel()
	ms := newMockSwarm(t)
	fast := func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) }
	boot := startNode(t, testRepo(t, "boot", fast), ms.on(Options{}))
	var provs []*Node
	for i := range 8 {
		provs = append(provs, startNode(t, testRepo(t, fmt.Sprint("prov", i), both(bootstrapFrom(boot), fast, func(c *config.Config) {
			c.Provider.Enabled, c.Provider.Price = true, "2.00"
			c.Provider.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
		})), ms.on(Options{})))
	}
	renter := startNode(t, testRepo(t, "renter", both(bootstrapFrom(boot), fast)), ms.on(Options{Light: true}))
	// Each provider publishes its offer again once its coordinate settles
	// (it looks every coordCheckEvery).
	waitFor(t, 90*time.Second, "the renter's coordinate settled, and every offer's", func() bool {
		if renter.coords.Error() > p2p.EstimateMaxError {
			return false
		}
		for _, p := range provs {
			o, ok := renter.market.Snapshot().Offer(p.id, offer.ProviderOfferID)
			if !ok || o.Coordinate == nil || o.Coordinate.Error > p2p.EstimateMaxError {
				return false
			}
		}
		return true
	})

	// nearestFirst fails unless the first of rtts (the renter's figures,
	// in the order it ranked them) is the least, within the views'
	// rounding.
	nearestFirst := func(what string, rtts []time.Duration) {
		t.Helper()
		if len(rtts) != 8 {
			t.Fatalf("%s: %d candidates, want 8", what, len(rtts))
		}
		if least := slices.Min(rtts); rtts[0] > least+time.Millisecond {
			t.Errorf("%s: the first choice is %s away by the renter's own figures, and one is %s away (%v)", what, rtts[0], least, rtts)
		}
	}
	req := api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, MaxPrice: "2.50", Limit: 8}
	res, err := renter.Match(context.Background(), req)
	if err != nil {
		t.Fatalf("match: %v", err)
	}
	var rtts []time.Duration
	for _, c := range res.Candidates {
		if c.Offer.RTTSource == string(market.RTTUnknown) {
			t.Errorf("%s: the renter knows no RTT to it", c.Offer.Provider)
		}
		rtts = append(rtts, time.Duration(c.Offer.RTTMillis*float64(time.Millisecond)))
		t.Logf("%d %s: %s %.0fms", c.Rank, c.Offer.Provider[len(c.Offer.Provider)-6:], c.Offer.RTTSource, c.Offer.RTTMillis)
	}
	nearestFirst("the renter's match", rtts)
	matched := slices.Clone(rtts)

	// From the offers' coordinates alone, as a renter that never dialled
	// the providers would: every offer carries one, and the renter ranks
	// by the estimates they give.
	b, err := buildBid(req, renter.id, renter.swarm, time.Now(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range provs {
		o, ok := renter.market.Snapshot().Offer(p.id, offer.ProviderOfferID)
		if !ok || o.Coordinate == nil {
			t.Fatalf("%s: offer %v without a coordinate", p.id, ok)
		}
		if _, err := renter.coords.Estimate(p2p.CoordFromProto(o.Coordinate)); err != nil {
			t.Fatalf("%s: %v", p.id, err)
		}
	}
	byEstimate := market.NewMatcher(market.DefaultMatchConfig(), renter.reputation, offerCoords{renter.coords}).Match(renter.market.Snapshot(), b, time.Now(), 8)
	rtts = rtts[:0]
	for _, c := range byEstimate.Candidates {
		if c.RTTSource != market.RTTEstimated {
			t.Fatalf("ranked by estimates: %s's RTT is %s", c.Issuer, c.RTTSource)
		}
		rtts = append(rtts, c.RTT)
	}
	nearestFirst("ranked by the offers' coordinates", rtts)

	// A fresh renter has measured none of them, and its coordinate has not
	// settled: it measures its best candidates before it ranks them, and
	// ranks by what it measured.
	fresh := startNode(t, testRepo(t, "fresh", bootstrapFrom(boot)), ms.on(Options{Light: true}))
	waitFor(t, 15*time.Second, "the offers in the fresh renter's book", func() bool { return fresh.market.Snapshot().Len() == 8 })
	var said []string
	fb, err := buildBid(req, fresh.id, fresh.swarm, time.Now(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cands := fresh.renter.Candidates(context.Background(), fresh.market.Matcher, fb, 8, time.Now(), RentOutput{Progress: func(l string) { said = append(said, l) }})
	if !slices.ContainsFunc(said, func(l string) bool { return strings.Contains(l, "measured the RTT") }) {
		t.Errorf("the fresh renter did not say it measured: %q", said)
	}
	if len(cands) == 0 || cands[0].RTTSource != market.RTTMeasured {
		t.Fatalf("the fresh renter's candidates: %+v; want the first measured", cands)
	}
	var measured []time.Duration
	for _, c := range cands {
		t.Logf("fresh: %s %s %s", c.Issuer.String()[46:], c.RTTSource, c.RTT.Round(time.Millisecond))
		if c.RTTSource == market.RTTMeasured {
			measured = append(measured, c.RTT)
		}
	}
	if least := slices.Min(measured); cands[0].RTT > least {
		t.Errorf("the fresh renter's first choice is %s away by its measurements, and one is %s away", cands[0].RTT, least)
	}

	// A limit between the nearest and the farthest, by the renter's own
	// figures: no provider beyond it is offered while one within it is.
	slices.Sort(matched)
	limit := (matched[3] + matched[4]) / 2
	req.MaxRTTMillis = int(math.Ceil(float64(limit) / float64(time.Millisecond)))
	res, err = renter.Match(context.Background(), req)
	if err != nil || len(res.Candidates) == 0 {
		t.Fatalf("match within %s: %d candidates, %v", limit, len(res.Candidates), err)
	}
	for _, c := range res.Candidates {
		if got := time.Duration(c.Offer.RTTMillis * float64(time.Millisecond)); got > time.Duration(req.MaxRTTMillis)*time.Millisecond {
			t.Errorf("within max_rtt %dms: %s offered at %s by the renter's figures", req.MaxRTTMillis, c.Offer.Provider, got)
		}
	}
}

// offerCoords estimates RTTs from the offers' coordinates only, as a
// renter that has measured no provider and exchanged no coordinate.
type offerCoords struct{ c *p2p.Coordinates }

func (offerCoords) RTT(peer.ID) (time.Duration, bool) { return 0, false }

func (s offerCoords) EstimateRTT(_ peer.ID, c *pb.NetworkCoordinate) (time.Duration, bool) {
	if c == nil {
		return 0, false
	}
	d, err := s.c.Estimate(p2p.CoordFromProto(c))
	return d, err == nil
}

// The connection manager never trims the network.near_peers connected
// peers of least measured RTT: with near_peers 2, two peers are marked
// near; on mocknet with PlanetLab latencies they are the two nearest by
// the matrix, and on loopback the ones marked are the ones the host's
// connection manager protects.
func TestTheNearestPeersAreProtected(t *testing.T) {
	t.Parallel()
	forEachNet(t, func(t *testing.T, net testNet) {
		fast := func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) }
		boot := startNode(t, testRepo(t, "boot", fast), net.on(Options{}))
		var others []*Node
		for i := range 4 {
			others = append(others, startNode(t, testRepo(t, fmt.Sprint("peer", i), both(bootstrapFrom(boot), fast)), net.on(Options{})))
		}
		n := startNode(t, testRepo(t, "n", both(bootstrapFrom(boot), fast, func(c *config.Config) { c.Network.NearPeers = 2 })), net.on(Options{}))
		all := append([]*Node{boot}, others...)
		waitFor(t, 20*time.Second, "every peer connected and measured, two of them near", func() bool {
			near := 0
			for _, p := range n.Peers() {
				if p.RTTMillis == 0 {
					return false
				}
				if p.Near {
					near++
				}
			}
			return len(n.Peers()) == len(all) && near == 2
		})
		peers := n.Peers()
		if _, ok := net.(loopback); ok { // loopback RTTs are all alike: what counts is the protection
			for _, p := range peers {
				id, _ := peer.Decode(p.ID)
				if got := n.host.ConnManager().IsProtected(id, p2p.NearTag); got != p.Near {
					t.Errorf("%s: marked near %v, protected %v", p.ID, p.Near, got)
				}
			}
		}
		if ms, ok := net.(*mockSwarm); ok { // by the matrix, the two nearest are the two near
			truth := func(p string) time.Duration {
				id, _ := peer.Decode(p)
				a, _ := ms.row(n.id)
				b, _ := ms.row(id)
				return ms.m.OneWay(a, b) * 2
			}
			// A first sample taken while the swarm starts may read high;
			// the median of a few more rounds settles which are near.
			waitFor(t, 20*time.Second, "the two nearest by the matrix marked near", func() bool {
				peers = n.Peers()
				slices.SortFunc(peers, func(a, b api.Peer) int { return cmp.Compare(truth(a.ID), truth(b.ID)) })
				return peers[0].Near && peers[1].Near
			})
		}
	})
}

// A node keeps its network coordinate across a restart, so that a
// restarted provider's offer carries a settled one at once; one that no
// longer checks is dropped, and the node starts at the origin.
func TestACoordinateSurvivesARestart(t *testing.T) {
	t.Parallel()
	ms := newMockSwarm(t)
	fast := func(c *config.Config) { c.Network.PingInterval = config.Dur(time.Second) }
	boot := startNode(t, testRepo(t, "boot", fast), ms.on(Options{}))
	for i := range 3 {
		startNode(t, testRepo(t, fmt.Sprint("peer", i), both(bootstrapFrom(boot), fast)), ms.on(Options{}))
	}
	repo := testRepo(t, "n", both(bootstrapFrom(boot), fast))
	n := startNode(t, repo, ms.on(Options{}))
	waitFor(t, 60*time.Second, "the coordinate settles", func() bool { return n.coords.Error() <= p2p.EstimateMaxError })
	n.Close()
	was := n.coords.Own()

	n = startNode(t, repo, ms.on(Options{}))
	if got := n.coords.Own(); !slices.Equal(got.Vec, was.Vec) || got.Error != was.Error || got.Height != was.Height {
		t.Errorf("after a restart the coordinate is %+v, was %+v", got, was)
	}
	n.Close()

	store, err := pebbleds.NewDatastore(repo.DatastorePath())
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := proto.Marshal(&pb.NetworkCoordinate{Vec: []float64{1, 2, 3}})
	if err := store.Put(context.Background(), coordKey, bad); err != nil {
		t.Fatal(err)
	}
	store.Close()
	n = startNode(t, repo, ms.on(Options{}))
	if e := n.coords.Error(); e != coordinate.DefaultConfig().VivaldiErrorMax {
		t.Errorf("a kept coordinate of 3 dimensions was taken up: error %v", e)
	}
	if _, err := n.store.Get(context.Background(), coordKey); err == nil {
		t.Error("the kept coordinate that did not check was not dropped")
	}
}
