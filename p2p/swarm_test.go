package p2p_test

import (
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/test"
)

func TestRendezvousShardsSpreadPeers(t *testing.T) {
	counts := make([]int, p2p.RendezvousShards)
	for range 8000 {
		id, err := test.RandPeerID()
		if err != nil {
			t.Fatal(err)
		}
		counts[p2p.RendezvousShard(id)]++
	}
	// 1,000 expected per shard; 4 standard deviations either way.
	for i, c := range counts {
		if c < 880 || c > 1120 {
			t.Errorf("shard %d holds %d of 8000 peers, want about 1000: %v", i, c, counts)
		}
	}
	s := p2p.Swarm{Name: "lab"}
	if a, b := s.Rendezvous(0), s.Rendezvous(1); a == b || !strings.HasPrefix(a, "/idlegrid/"+s.ID()+"/") {
		t.Errorf("shard namespaces %q and %q", a, b)
	}
}

func TestEveryMessageOfASwarmNamesIt(t *testing.T) {
	for _, sw := range []p2p.Swarm{{}, {Name: "lab", PSK: make([]byte, 32)}} {
		want := market.DefaultLimits()
		want.Swarm = sw.Tag()
		if l := sw.Limits(); l != want {
			t.Errorf("swarm %q: limits %+v; want market's defaults naming %q", sw.ID(), l, sw.Tag())
		}
	}
}
