package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
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
	// The connection manager's grace of a minute trimmed nothing: the
	// bounder closed every peer past the 4.
	if got, want := BoundEvictions(h), uint64(len(others)-4); got != want {
		t.Errorf("BoundEvictions %d, want %d", got, want)
	}
	if got, want := BoundEvictions(wrapper{h}), uint64(len(others)-4); got != want {
		t.Errorf("BoundEvictions through a wrapper's Unwrap %d, want %d", got, want)
	}
	if got := BoundEvictions(others[0]); got != 0 {
		t.Errorf("BoundEvictions of an unbound host %d, want 0", got)
	}
}

// wrapper wraps a host as a node's own wrappers do.
type wrapper struct{ host.Host }

func (w wrapper) Unwrap() host.Host { return w.Host }

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

// A bounder's count of peers follows the network's: peers that connect,
// and then close from either end, leave it equal to Peers; a peer of two
// connections is one peer until both have closed.
func TestABounderCountsThePeersTheNetworkHolds(t *testing.T) {
	mn, err := mocknet.FullMeshLinked(7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	hs := mn.Hosts()
	cm, err := connmgr.NewConnManager(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	h := BoundHost(hs[0], cm, Bound{High: 100})
	t.Cleanup(func() { h.Close() })
	bd := h.(*boundHost).bd
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	agree := func(want int) {
		t.Helper()
		for bd.peers() != want || len(h.Network().Peers()) != want {
			select {
			case <-ctx.Done():
				t.Fatalf("the bounder counts %d peers and the network holds %d, want %d", bd.peers(), len(h.Network().Peers()), want)
			case <-time.After(time.Millisecond):
			}
		}
	}
	for _, o := range hs[1:] {
		if _, err := mn.ConnectPeers(o.ID(), h.ID()); err != nil {
			t.Fatal(err)
		}
	}
	agree(6)
	hs[1].Network().ClosePeer(h.ID()) // from its end
	h.Network().ClosePeer(hs[2].ID()) // from ours
	agree(4)
	twice := []network.Conn{remoteConn{p: "twice"}, remoteConn{p: "twice"}}
	for _, c := range twice {
		bd.Connected(h.Network(), c)
	}
	if got := bd.peers(); got != 5 {
		t.Fatalf("a fifth peer of two connections: the bounder counts %d peers, want 5", got)
	}
	bd.Disconnected(h.Network(), twice[0])
	if got := bd.peers(); got != 5 {
		t.Fatalf("one of the fifth peer's two connections closed: the bounder counts %d peers, want 5", got)
	}
	bd.Disconnected(h.Network(), twice[1])
	if got := bd.peers(); got != 4 {
		t.Fatalf("both closed: the bounder counts %d peers, want 4", got)
	}
}

// remoteConn is a connection to p, as far as a notification reads it.
type remoteConn struct {
	network.Conn
	p peer.ID
}

func (c remoteConn) RemotePeer() peer.ID { return c.p }

// BenchmarkBounderConnected is what a bound host's connection
// notification costs on a host of 1,000 peers (a bootstrap node's share
// of a swarm), beside a linear scan of them, the network's Peers, which
// the notification called before it counted: reported as the ratio.
func BenchmarkBounderConnected(b *testing.B) {
	const n = 1000
	mn := mocknet.New()
	b.Cleanup(func() { mn.Close() })
	h0, err := mn.GenPeer()
	if err != nil {
		b.Fatal(err)
	}
	cm, err := connmgr.NewConnManager(n*2, n*4)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cm.Close() })
	h := BoundHost(h0, cm, Bound{High: n * 4})
	b.Cleanup(func() { h.Close() })
	for range n {
		o, err := mn.GenPeer()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := mn.LinkPeers(o.ID(), h0.ID()); err != nil {
			b.Fatal(err)
		}
		if _, err := mn.ConnectPeers(o.ID(), h0.ID()); err != nil {
			b.Fatal(err)
		}
	}
	bd := h.(*boundHost).bd
	c := h.Network().Conns()[0]
	timed := func(f func()) time.Duration {
		start := time.Now()
		for range b.N {
			f()
		}
		return time.Since(start)
	}
	b.ResetTimer()
	scan := timed(func() { _ = len(h.Network().Peers()) > bd.b.High })
	notify := timed(func() {
		bd.Connected(h.Network(), c)
		bd.Disconnected(h.Network(), c)
	})
	b.ReportMetric(float64(notify.Nanoseconds())/float64(b.N), "ns/notify")
	b.ReportMetric(float64(scan.Nanoseconds())/float64(b.N), "ns/scan")
	b.ReportMetric(float64(notify)/float64(scan), "notify/scan")
}
