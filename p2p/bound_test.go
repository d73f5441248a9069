package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// A bounder holds a host to its high-water mark however fast peers
// arrive, at once and not after a grace period: of 10 peers that dial a
// host bound at 4 (its connection manager at 2/4 with a minute's grace,
// so that the manager itself trims nothing), the host keeps the two the
// Keeper protects, the one a library tagged and the newest.
func TestABounderHoldsTheMarkAndKeepsTheProtected(t *testing.T) {
	mn, err := mocknet.FullMeshLinked(11)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	hs := mn.Hosts()
	cm, err := connmgr.NewConnManager(2, 4, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	hs[0].Network().Notify(cm.Notifee())
	h := BoundHost(hs[0], cm, Bound{High: 4})
	t.Cleanup(func() { h.Close() })
	others := hs[1:]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(o host.Host) {
		t.Helper()
		if err := o.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range others[:3] {
		dial(o)
	}
	h.ConnManager().Protect(others[0].ID(), NearTag)
	h.ConnManager().Protect(others[1].ID(), RandomTag)
	h.ConnManager().Protect(others[2].ID(), "pubsub:offers")
	for _, o := range others[3:] {
		dial(o)
		if err := waitPeers(ctx, h, 4); err != nil {
			t.Fatalf("after %s dialled: %v", o.ID(), err)
		}
	}
	left := map[peer.ID]bool{}
	for _, p := range h.Network().Peers() {
		left[p] = true
	}
	for i, why := range []string{"near", "random", "a library's"} {
		if !left[others[i].ID()] {
			t.Errorf("the peer under %s protection was closed", why)
		}
	}
	if newest := others[len(others)-1].ID(); !left[newest] {
		t.Errorf("the newest peer was closed; the oldest unvalued should go first")
	}
}

// waitPeers waits until h holds at most n peers.
func waitPeers(ctx context.Context, h host.Host, n int) error {
	for len(h.Network().Peers()) > n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// A bounder closes the least valued first, and among equals those past
// their grace period before the young, the oldest first: a newcomer (a
// renter that dialled a provider holding its full set) goes last of the
// untagged, and a gossip mesh peer only after every untagged one.
func TestEvictionOrder(t *testing.T) {
	now := time.Now()
	grace := 20 * time.Second
	cs := []candidate{
		{p: "newcomer", firstAt: now},
		{p: "mesh", value: ProtectValue, firstAt: now.Add(-time.Hour)},
		{p: "young-mesh", value: ProtectValue, firstAt: now.Add(-time.Second)},
		{p: "old", firstAt: now.Add(-time.Hour)},
		{p: "older", firstAt: now.Add(-2 * time.Hour)},
	}
	want := []peer.ID{"older", "old", "newcomer", "mesh", "young-mesh"}
	got := evictionOrder(cs, now, grace)
	for i, c := range got {
		if c.p != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
