package p2p

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// A shard's join holds the shard lock while the router adds the topic on
// its loop, and the loop asks admission of every message a peer sends,
// which asks InMesh for the mesh relays' share: with the lock held, a
// message must still be admitted and delivered, or a renter that bids
// on a new shard while peers gossip to it waits on its router for good
// (it did, under a flood).
func TestTheRoutersLoopDoesNotWaitOnAShardJoin(t *testing.T) {
	mn, err := mocknet.FullMeshLinked(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw := Swarm{Name: "loop"}
	var gs []*Gossip
	for _, h := range mn.Hosts() {
		g, err := NewGossip(ctx, h, GossipConfig{Swarm: sw, OutboundQueue: 64, MaxMessageSize: 1 << 20, PeerScoring: true, ValidatorTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		gs = append(gs, g)
	}
	from, to := gs[0], gs[1]
	asked := make(chan struct{}, 1)
	to.SetAdmission(func(kind string, p peer.ID, _ []byte) bool {
		to.InMesh(kind, p) // what the strangers' budget asks
		select {
		case asked <- struct{}{}:
		default:
		}
		return true
	}, nil)
	sub, err := to.Topic(TopicEvidence).Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	for !slices.Contains(from.PubSub().ListPeers(sw.Topic(TopicEvidence)), mn.Hosts()[1].ID()) {
		select {
		case <-ctx.Done():
			t.Fatal("the publisher never heard the receiver's subscription")
		case <-time.After(10 * time.Millisecond):
		}
	}

	to.shardMu.Lock() // as JoinShard holds it while the router adds its topic
	unlocked := false
	defer func() {
		if !unlocked {
			to.shardMu.Unlock()
		}
	}()
	if err := from.Topic(TopicEvidence).Publish(ctx, []byte("evidence")); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	m, err := sub.Next(dctx)
	if err != nil {
		t.Fatalf("with the shard lock held, the message never came: %v", err)
	}
	select {
	case <-asked:
	default:
		t.Fatal("the message came without admission asked of it")
	}
	if string(m.Data) != "evidence" {
		t.Errorf("received %q", m.Data)
	}
	to.shardMu.Unlock()
	unlocked = true
	// And a join goes on as before.
	if _, err := to.JoinShard(TopicOffers, "h100"); err != nil {
		t.Fatal(err)
	}
}
