package p2p

import (
	"context"
	"fmt"
	"testing"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
)

// A peer that answers a seeds request with whatever it likes gets no
// more than MaxSeedsReply peer IDs taken, and none that is not a peer
// ID; a server answers with its seeds, capped.
func TestSeedsExchangeHoldsItsCaps(t *testing.T) {
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		got, err := FetchSeeds(ctx, a, Swarm{}, b)
		for _, p := range got {
			each([]byte(p))
		}
		return len(got), err
	}
	none := func(network.Stream) error { return nil }
	checkCaps(t, SeedsProtocol, none, fetch, []capCase{
		{"oversized seeds", 3, maxSeedSize + 1, 0, "message"},
		{"too many seeds", MaxSeedsReply + 5, 16, 0, "more than 32 seeds"}, // 16 bytes of 'x' are no peer ID
		{"what is no peer ID", 10, 40, 0, ""},
	})
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run("served over "+transport, func(t *testing.T) {
			testSeedsServed(t, transport)
		})
	}
}

func testSeedsServed(t *testing.T, transport string) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	connectOver(t, a, b, transport)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seeds []peer.ID
	for range MaxSeedsReply + 8 {
		seeds = append(seeds, test.RandPeerIDFatal(t))
	}
	ServeSeeds(Server{Host: b, Ctx: ctx}, func() []peer.ID { return seeds })
	got, err := FetchSeeds(ctx, a, Swarm{}, b.ID())
	if err != nil || fmt.Sprint(got) != fmt.Sprint(seeds[:MaxSeedsReply]) {
		t.Errorf("fetched %d seeds (%v), want the first %d served", len(got), err, MaxSeedsReply)
	}
}
