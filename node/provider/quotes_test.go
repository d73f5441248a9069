package provider

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// takeAll lets pop take every bid.
func takeAll(*pb.Bid) bool { return true }

// A relay's flood of bids fills its own lane: another relay's bid, and
// the relay's own, are quoted next, and a relay past its share is refused.
func TestBidQueueTakesRelaysInTurn(t *testing.T) {
	q := newBidQueue()
	bid := func(id string) *pb.Bid { return &pb.Bid{Header: &pb.Header{Id: id}} }
	for i := range bidsPerRelay {
		if !q.push("flooder", bid(fmt.Sprint("spam-", i))) {
			t.Fatalf("spam bid %d refused within the relay's share", i)
		}
	}
	if q.push("flooder", bid("spam-over")) {
		t.Error("a bid beyond the relay's share was queued")
	}
	if !q.push("honest", bid("honest")) {
		t.Fatal("another relay's bid refused")
	}
	own := &pb.Bid{Header: &pb.Header{Id: "flooder-own", Issuer: []byte("flooder")}}
	if !q.push("flooder", own) {
		t.Fatal("a relay's own bid refused behind the bids it relayed")
	}
	var order []string
	for b, ok := q.pop(takeAll); ok; b, ok = q.pop(takeAll) {
		order = append(order, b.Header.Id)
	}
	if len(order) != bidsPerRelay+2 || order[0] != "spam-0" || order[1] != "honest" || order[2] != "flooder-own" {
		t.Errorf("quoted in the order %v; want the honest bid second and the relay's own third", order)
	}
	for i := range maxRelays {
		q.push(peer.ID(fmt.Sprint("relay-", i)), bid("b"))
	}
	if q.push("one-more", bid("b")) {
		t.Error("a relay beyond maxRelays was queued")
	}
}

// A lane whose oldest bid pop may not take yet keeps its place at the
// front of the turn: the next lanes are served past it, and it is served
// first once its bid may be taken.
func TestBidQueueKeepsAPassedLanesTurn(t *testing.T) {
	q := newBidQueue()
	bid := func(id string) *pb.Bid { return &pb.Bid{Header: &pb.Header{Id: id}} }
	for _, relay := range []peer.ID{"a", "b", "c"} {
		q.push(relay, bid(string(relay)+"1"))
		q.push(relay, bid(string(relay)+"2"))
	}
	notA := func(b *pb.Bid) bool { return b.Header.Id[0] != 'a' }
	var order []string
	for range 3 {
		b, _ := q.pop(notA)
		order = append(order, b.Header.Id)
	}
	for b, ok := q.pop(takeAll); ok; b, ok = q.pop(takeAll) {
		order = append(order, b.Header.Id)
	}
	if want := "[b1 c1 b2 a1 c2 a2]"; fmt.Sprint(order) != want {
		t.Errorf("popped %v, want %s: a's lane first once it may be served", order, want)
	}
	if _, ok := q.pop(takeAll); ok {
		t.Error("popped from an empty queue")
	}
}

// lookupNet is a swarm in which the provider is connected to some
// bidders; the quote to any other waits in its lookup until the test
// releases one lookup, or the quoting ends.
type lookupNet struct {
	Publisher // the provider's gossip, not used here
	connected map[peer.ID]bool
	release   chan struct{}
	sent      chan peer.ID // each bidder a quote went to, or whose lookup started
}

func (n *lookupNet) Connected(p peer.ID) bool { return n.connected[p] }

func (n *lookupNet) SendQuote(ctx context.Context, to peer.ID, _ []byte) error {
	n.sent <- to
	if n.connected[to] {
		return nil
	}
	select {
	case <-n.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A flood of bids whose bidders must be looked up (free keys, which are
// nowhere) holds at most the lookups' share of the quoting slots: a bid
// of a connected renter is quoted at once though every lookup stalls,
// and a bid of a renter that is not connected waits for a lookup in its
// lane's turn, and gets one of the next lookups that free, ahead of the
// flood's lanes behind it. Before the lookups had a share of their own,
// the flood held every slot and the connected renter's bid waited for
// the lookups' timeouts.
func TestAFloodOfLookupsLeavesQuotesForOtherBidders(t *testing.T) {
	newID := func() peer.ID {
		_, pub, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPublicKey(pub)
		return id
	}
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := peer.IDFromPrivateKey(key)
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.Price = "1.00"
	cfg.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0"}}
	honest, far := newID(), newID()
	net := &lookupNet{connected: map[peer.ID]bool{honest: true}, release: make(chan struct{}), sent: make(chan peer.ID, 64)}
	p := New(Deps{ID: self, Swarm: "public", Key: key, Cfg: cfg, Store: dssync.MutexWrap(ds.NewMapDatastore()), Net: net, Clock: clock.System(), Log: slog.Default()})
	now := time.Now()
	o, err := offer.Build(cfg, self, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	p.own.PutOffer(o, now)
	bidBy := func(issuer peer.ID) *pb.Bid {
		b, err := market.NewBid(issuer, "bid-"+issuer.String(), market.BidSpec{Models: []string{"H100"}, Count: 1, Tier: pb.Tier_TIER_SILVER,
			Currency: "USD", MaxPriceMicros: 2_500_000, DurationSeconds: 3600}, now, market.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := bidBy(honest); len(p.matcher.Match(p.own.Snapshot(), b, now, 1).Candidates) == 0 {
		t.Fatalf("the test's bid does not fit the provider's offer: %s", p.matcher.Explain(p.own.Snapshot(), b, now))
	}
	next := func(what string) peer.ID {
		t.Helper()
		select {
		case id := <-net.sent:
			return id
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no quote sent and no lookup started in 10 s; %d lookups under way", what, len(p.locating))
			return ""
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.quoteLoop(ctx)
	defer p.Close()
	defer cancel()

	// The flood: three relays' lanes full of free keys' bids, more than
	// every quoting slot.
	const floodLanes = 3
	for r := range floodLanes {
		for range bidsPerRelay {
			if !p.bids.push(peer.ID(fmt.Sprint("flooder-", r)), bidBy(newID())) {
				t.Fatal("a flood bid refused within its lane's share")
			}
		}
	}
	if floodLanes*bidsPerRelay <= maxQuoting {
		t.Fatal("the flood does not outnumber the quoting slots")
	}
	for i := range maxLocating {
		next(fmt.Sprint("the flood's lookup ", i))
	}

	p.bids.push(honest, bidBy(honest))
	if id := next("a connected renter's bid behind stalled lookups"); id != honest {
		t.Fatalf("a quote went to %s, not to the connected renter, past the lookups' share", id)
	}

	p.bids.push("its-relay", bidBy(far))
	for freed := 1; freed <= floodLanes+1; freed++ {
		net.release <- struct{}{}
		if next("a freed lookup") == far {
			return
		}
	}
	t.Errorf("the unconnected renter's lookup not started after %d lookups freed; its lane had %d ahead of it", floodLanes+1, floodLanes)
}
