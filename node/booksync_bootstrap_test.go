package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A book sync is one more way in, within the strangers' budget, but a
// node's configured bootstrap peers are the sources its operator chose,
// not connections a stranger opened: a fresh renter, whose book is what
// its first sync brings, takes its bootstrap's whole book, each offer
// still within its issuer's budget. (With the strangers' budget alone it
// took a peer's share of it, a few hundred offers of a market of
// thousands, and rented from that.) A peer that is no bootstrap still
// gets only a share of the strangers' budget into the same node.
func TestAFreshRenterTakesItsBootstrapsWholeBook(t *testing.T) {
	const offers = 1200 // well past the strangers' burst
	if burst := int(p2p.StrangerRates[p2p.TopicOffers].Burst); offers < 4*burst {
		t.Fatalf("the book of %d offers must be well past the strangers' burst of %d", offers, burst)
	}
	sw := p2p.Swarm{Name: config.DefaultConfig(config.ProfileRenter).Swarm.Name}
	bookOf := func() (book [][]byte, issuers []peer.ID) {
		for _, key := range freshKeys(t, offers) {
			id, _ := peer.IDFromPrivateKey(key)
			book, issuers = append(book, offersOf(t, sw, key, 1, time.Now())...), append(issuers, id)
		}
		return book, issuers
	}
	book, _ := bookOf()
	boot := syncAttacker(t, sw, book)
	addr := fmt.Sprintf("%s/p2p/%s", boot.Addrs()[0], boot.ID())
	renter := startNode(t, testRepoWith(t, "renter", repo.InitOptions{Profile: config.ProfileRenter}, func(c *config.Config) { c.Network.Bootstrap = []string{addr} }), Options{})
	defer func() {
		if t.Failed() {
			t.Logf("the renter holds %d offers", renter.market.Snapshot().Len())
		}
	}()
	waitFor(t, 30*time.Second, "the renter takes its bootstrap's whole book", func() bool { return renter.market.Snapshot().Len() == offers })

	// A resync of books that agree carries no offer: the renter's digest
	// names the offers it holds, and its bootstrap sends none of them.
	if d := renter.market.Digest(t.Context()); d.Len() != offers {
		t.Errorf("the renter's digest names %d offers; it holds %d", d.Len(), offers)
	}
	if n, err := renter.link.FetchBook(t.Context(), boot.ID(), renter.market.Digest(t.Context()), func([]byte) {}); n != 0 || err != nil {
		t.Errorf("a resync with the bootstrap whose book it holds carried %d offers (%v); want none", n, err)
	}

	// The same book again, from a peer the node did not choose: what it
	// holds already changes nothing and costs no budget.
	meet(t, syncAttacker(t, sw, book), renter)
	if n := verdictsOf(renter, "offers/ignore/stranger_budget"); n != 0 {
		t.Errorf("a sync of offers the node held spent the strangers' budget: %d ignored", n)
	}

	// A book as big from a peer the node did not choose.
	book, issuers := bookOf()
	meet(t, syncAttacker(t, sw, book), renter)
	if n, most := heldOf(renter, issuers), int(p2p.StrangerRates[p2p.TopicOffers].Burst)+20; n > most {
		t.Errorf("a node that synced a peer it did not choose holds %d of its offers; the strangers' budget allows about %d", n, most)
	}
}

// verdictsOf counts n's verdicts of one topic/result/reason.
func verdictsOf(n *Node, want string) (count int64) {
	n.market.Validator.EachVerdict(func(topic, result, reason string, k int64) {
		if topic+"/"+result+"/"+reason == want {
			count = k
		}
	})
	return count
}

// nonZeroVerdicts lists n's verdicts that are not zero, for a failure's
// message.
func nonZeroVerdicts(n *Node) string {
	var out []string
	n.market.Validator.EachVerdict(func(topic, result, reason string, k int64) {
		if k > 0 {
			out = append(out, fmt.Sprintf("%s/%s/%s=%d", topic, result, reason, k))
		}
	})
	return strings.Join(out, " ")
}
