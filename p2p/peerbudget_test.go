package p2p

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// However many peers of one class arrive at once, each filling a new
// share, they move at most half the strangers' burst out of the pool: a
// hundred fresh connections that flood while the mesh is quiet leave the
// mesh's relays half the burst when they start to relay.
func TestOneClassOfPeersTakesAtMostHalfTheBurst(t *testing.T) {
	r := StrangerRates[TopicOffers]
	b := newSharedBudget(r.PerSecond, r.Burst)
	b.class = func(p peer.ID) int {
		if strings.HasPrefix(string(p), "mesh-") {
			return 1
		}
		return 0
	}
	now := time.Unix(1_700_000_000, 0)
	took := 0
	for range 10 { // ten offers each, in one instant
		for i := range 100 {
			if b.take(peer.ID(fmt.Sprint("conn-", i)), now) {
				took++
			}
		}
	}
	if most := int(r.Burst / 2); took > most {
		t.Errorf("a hundred connections took %d of the burst at once; a class may take %d", took, most)
	}
	relayed := 0
	for range 100 {
		for i := range 6 {
			if b.take(peer.ID(fmt.Sprint("mesh-", i)), now) {
				relayed++
			}
		}
	}
	if least := int(r.Burst/2) - 6; relayed < least { // each share may keep less than a token

		t.Errorf("after the connections' flood the mesh's relays took %d at once; want half the burst, %d", relayed, least)
	}
}

// The first peer to draw on the strangers' budget fills its share at
// once, but does not keep the burst from those that follow: each of
// twenty peers arriving in the same instant after it, in either class,
// passes its first message (a provider that joins with two others
// reaches this node with its offer at once, not at the next sync).
func TestTheFirstShareLeavesTheNextPeersTheirParts(t *testing.T) {
	r := StrangerRates[TopicOffers]
	for _, classed := range []bool{false, true} {
		b := newSharedBudget(r.PerSecond, r.Burst)
		if classed {
			b.class = func(p peer.ID) int {
				if strings.HasPrefix(string(p), "mesh-") {
					return 1
				}
				return 0
			}
		}
		now := time.Unix(1_700_000_000, 0)
		for _, first := range []string{"conn-first", "mesh-first"} {
			if !b.take(peer.ID(first), now) {
				t.Fatalf("classed %v: %s's first message refused", classed, first)
			}
		}
		for i := range 20 {
			for _, p := range []string{fmt.Sprint("conn-", i), fmt.Sprint("mesh-", i)} {
				if !b.take(peer.ID(p), now) {
					t.Errorf("classed %v: %s, the %dth to arrive after the first, refused its first message", classed, p, i+1)
				}
			}
		}
		// Still bounded: the classes together hold at most the burst.
		held := 0.0
		for _, s := range b.shares {
			held += s.tokens
		}
		if held+b.pool.tokens > r.Burst+1e-9 {
			t.Errorf("classed %v: shares hold %.1f and the pool %.1f, more than the burst %v", classed, held, b.pool.tokens, r.Burst)
		}
	}
}

// A relay whose share of the strangers' budget a flood it relays has
// spent still hands this node the offers it publishes itself: those
// draw on a share of their own.
func TestARelaysOwnOffersOutliveItsSpentShare(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	v := NewMarketValidator(market.DefaultLimits(), nil, func() time.Time { return now }, nil)
	relay, own := signedOffer(t)
	spam := strangerOffers(t, int(StrangerRates[TopicOffers].Burst))
	refused := false
	for _, env := range spam {
		if !v.admit(TopicOffers, relay, env, byGossip) {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("the relay's share held the whole burst")
	}
	if !v.admit(TopicOffers, relay, own, byGossip) {
		t.Error("the relay's own offer was refused for the share its relaying spent")
	}
}
