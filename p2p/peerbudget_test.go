package p2p

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
