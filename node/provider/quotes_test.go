package provider

import (
	"fmt"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

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
	for b, ok := q.pop(); ok; b, ok = q.pop() {
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
