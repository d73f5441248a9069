package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
)

// followingFamilies has a node hear only some GPU families' shards.
func followingFamilies(families ...string) func(*config.Config) {
	return func(c *config.Config) { c.Gossip.Follow = families }
}

// A node that follows one GPU family holds only that family's offers,
// by gossip and by book sync alike, while a node that follows every
// family (as every node of the last version does) holds all; a view of
// another family fetches that family's shard then. A provider hears the
// bids for its own GPUs' family whatever it follows, and quotes a renter
// that follows another family.
func TestANodeHearsTheFamiliesItFollows(t *testing.T) {
	t.Parallel()
	log := keepLog(t)
	boot := startNode(t, testRepo(t, "boot", nil), Options{Logger: log.node("boot")})
	h100 := startNode(t, testRepo(t, "h100", both(bootstrapFrom(boot), asProvider("H100", 8, 80, "2.50", "DE"), followingFamilies("A100"))), Options{Logger: log.node("h100")})
	a100 := startNode(t, testRepo(t, "a100", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.10", "FR"))), Options{Logger: log.node("a100")})
	watcher := startNode(t, testRepoWith(t, "watcher", repo.InitOptions{Profile: config.ProfileRenter}, both(bootstrapFrom(boot), followingFamilies("A100"))), Options{Logger: log.node("watcher")})

	waitFor(t, 20*time.Second, "the node that follows every family holds both offers", bookHolds(boot, 2))
	if got := h100.market.Followed(); len(got) != 2 || got[0] != "a100" || got[1] != "h100" {
		t.Errorf("the H100 provider that follows A100 follows %v, want [a100 h100]", got)
	}
	waitFor(t, 20*time.Second, "the A100 watcher holds the A100 offer", bookHolds(watcher, 1))
	synced := watcher.market.Synced()
	watcher.market.FetchBook(context.Background(), boot.id) // from a book that holds both
	if watcher.market.Synced() != synced+1 {
		t.Fatal("the watcher's sync with the bootstrap peer did not complete")
	}
	offers, err := watcher.Offers(api.OfferQuery{})
	if err != nil || len(offers) != 1 || offers[0].Provider != a100.id.String() {
		t.Fatalf("the A100 watcher, after a sync with a book of both: %+v, %v; want the A100 offer alone", offers, err)
	}

	// A view of H100s fetches the H100 shard.
	offers, err = watcher.API().Offers(context.Background(), api.OfferQuery{GPU: "H100"})
	if err != nil || len(offers) != 1 || offers[0].Provider != h100.id.String() {
		t.Errorf("the A100 watcher's view of H100s: %+v, %v; want the H100 offer", offers, err)
	}

	// The watcher bids for H100s: the bid goes out on the H100 shard, which
	// the provider follows for its own GPUs.
	waitFor(t, 20*time.Second, "the watcher connected to every node", connectedToAll([]*Node{boot, h100, a100, watcher}))
	waitFor(t, 20*time.Second, "the watcher knows the H100 provider follows the H100 bids shard", func() bool {
		return slices.Contains(watcher.link.Gossip.ShardPeers(p2p.TopicBids, "h100"), h100.id)
	})
	bid, err := watcher.PlaceBid(context.Background(), api.BidRequest{GPUs: []string{"H100"}, Count: 8, Hours: 1, Tier: "silver", MaxPrice: "3.00", WaitMillis: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Quotes) != 1 || bid.Quotes[0].Provider != h100.id.String() {
		t.Errorf("a bid for H100s from a node that follows A100: quotes %+v, want the H100 provider's", bid.Quotes)
	}
}

// gossip.follow names GPU families the catalog knows, at most
// config.MaxFollow of them.
func TestFollowNamesKnownFamilies(t *testing.T) {
	for _, tc := range []struct {
		follow []string
		ok     bool
	}{
		{nil, true}, {[]string{"H100", "a100", "RTX 4090"}, true},
		{[]string{"H100", "Quantum Widget 9"}, false},
		{[]string{"A2", "A10", "A16", "A30", "A40", "A100", "H100", "H200", "L4"}, false},
	} {
		c := config.DefaultConfig(config.ProfileRenter)
		c.Gossip.Follow = tc.follow
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("gossip.follow = %q: %v", tc.follow, err)
		}
		if err != nil && !strings.Contains(err.Error(), "gossip.follow") {
			t.Errorf("the error does not name the field: %v", err)
		}
	}
}
