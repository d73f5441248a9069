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

// boundMocknet is host 0 of an n-host mocknet, bound (BoundHost) to a
// real connection manager at low/high with no grace period, connected to
// every other host; and the others.
func boundMocknet(t *testing.T, n, low, high int) (host.Host, []host.Host) {
	t.Helper()
	mn, err := mocknet.FullMeshLinked(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	hs := mn.Hosts()
	cm, err := connmgr.NewConnManager(low, high, connmgr.WithGracePeriod(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	hs[0].Network().Notify(cm.Notifee())
	h := BoundHost(hs[0], cm, Bound{})
	for _, o := range hs[1:] {
		if err := h.Connect(context.Background(), peer.AddrInfo{ID: o.ID(), Addrs: o.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	return h, hs[1:]
}

// Only a Keeper's tags protect: a library's protection (gossipsub's mesh
// peers, kad-dht's far buckets) becomes a tag value, so that a trim can
// still reach the bound, taking those peers last.
func TestOnlyTheKeeperProtects(t *testing.T) {
	h, others := boundMocknet(t, 9, 2, 4)
	cm := h.ConnManager()
	cm.Protect(others[0].ID(), NearTag)
	cm.Protect(others[1].ID(), RandomTag)
	for _, o := range others[2:5] {
		cm.Protect(o.ID(), "pubsub:offers") // three peers a library protects
	}
	if !cm.IsProtected(others[2].ID(), "pubsub:offers") || !cm.IsProtected(others[2].ID(), "") {
		t.Error("a library's protection does not read back as protection")
	}
	cm.TrimOpenConns(context.Background())
	left := map[peer.ID]bool{}
	for _, p := range h.Network().Peers() {
		left[p] = true
	}
	// The trim keeps the low-water mark (2) of unprotected peers, the
	// most valued first, and the Keeper's two.
	if len(left) != 4 {
		t.Errorf("%d peers left after a trim, want 4 (2 protected + low water 2)", len(left))
	}
	for i, want := range []bool{true, true} {
		if !left[others[i].ID()] {
			t.Errorf("keeper-protected peer %d trimmed (want kept: %v)", i, want)
		}
	}
	kept := 0
	for _, o := range others[2:5] {
		if left[o.ID()] {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("%d of the 3 library-protected peers kept, want 2: they outrank the untagged, and do not escape the trim", kept)
	}
	if cm.Unprotect(others[2].ID(), "pubsub:offers"); cm.IsProtected(others[2].ID(), "pubsub:offers") {
		t.Error("unprotected peer still reads as protected")
	}
}

// A Keeper protects the nearest peers by RTT and a random share that stays
// chosen while connected.
func TestTheKeeperProtectsTheNearestAndARandomShare(t *testing.T) {
	h, others := boundMocknet(t, 9, 100, 200)
	rtt := map[peer.ID]time.Duration{}
	for i, o := range others {
		rtt[o.ID()] = time.Duration(10+i) * time.Millisecond
	}
	k := NewKeeper(h, func(p peer.ID) (time.Duration, bool) { d, ok := rtt[p]; return d, ok }, 2, 3)
	k.Refresh()
	var near, random []peer.ID
	for _, o := range others {
		if k.Near(o.ID()) {
			near = append(near, o.ID())
		}
		if k.Random(o.ID()) {
			random = append(random, o.ID())
		}
		if k.Near(o.ID()) != h.ConnManager().IsProtected(o.ID(), NearTag) || k.Random(o.ID()) != h.ConnManager().IsProtected(o.ID(), RandomTag) {
			t.Errorf("%s: the keeper's choice and the connection manager's protection differ", o.ID())
		}
	}
	if len(near) != 2 || near[0] != others[0].ID() || near[1] != others[1].ID() {
		t.Errorf("near %v, want the two of least RTT", near)
	}
	if len(random) != 3 {
		t.Fatalf("%d random peers, want 3", len(random))
	}
	k.Refresh()
	for _, p := range random {
		if !k.Random(p) {
			t.Errorf("random peer %s dropped while still connected", p)
		}
	}
	h.Network().ClosePeer(random[0])
	k.Refresh()
	n := 0
	for _, o := range others {
		if k.Random(o.ID()) {
			n++
		}
	}
	if k.Random(random[0]) || n != 3 {
		t.Errorf("after a random peer left: it is still chosen (%v), or the share is %d, want 3", k.Random(random[0]), n)
	}
}

// A lookup's results are dialled nearest first, the unknown after, and
// only as many as the node lacks of Want, plus up to improveDials that
// are nearer than most of its connections.
func TestDiscoveryDialsTheNearestItLacks(t *testing.T) {
	h, others := boundMocknet(t, 4, 100, 200) // connected to 3 peers
	near := map[peer.ID]time.Duration{}
	for i, o := range others {
		near[o.ID()] = time.Duration(50+10*i) * time.Millisecond // 50, 60, 70 ms
	}
	var found []peer.AddrInfo
	for i := range 6 {
		id := peer.ID(rune('a' + i))
		found = append(found, peer.AddrInfo{ID: id})
		if i < 4 {
			near[id] = time.Duration(100-20*i) * time.Millisecond // a 100, b 80, c 60, d 40
		}
	}
	d := &Discovery{h: h, dialed: map[peer.ID]time.Time{}, cfg: DiscoveryConfig{
		SettledInterval: time.Hour,
		Nearness:        func(p peer.ID) (time.Duration, bool) { r, ok := near[p]; return r, ok },
	}}
	ranked := d.rank(found)
	want := []peer.ID{"d", "c", "b", "a"}
	for i, p := range want {
		if ranked[i].ID != p {
			t.Fatalf("ranked %v, want %v first and the unknown e, f after", ranked, want)
		}
	}
	d.cfg.Want = 5 // lacks 2: d and c; then of b and a, none is nearer than the median (60 ms)
	if got := d.worthDialling(ranked); len(got) != 2 || got[0].ID != "d" || got[1].ID != "c" {
		t.Errorf("want 5 of 3: dialled %v, want d and c", got)
	}
	d.cfg.Want = 3 // lacks none: d (40 ms) is nearer than the median, c (60 ms) is not
	if got := d.worthDialling(ranked); len(got) != 1 || got[0].ID != "d" {
		t.Errorf("settled: dialled %v, want only d", got)
	}
	// d was dialled and is gone again (it trimmed this node): it comes
	// after the rest for what the node lacks, and is no improvement.
	d.noteDialled(ranked[:1], time.Now())
	d.cfg.Want = 5
	if got := d.worthDialling(ranked); len(got) != 2 || got[0].ID != "c" || got[1].ID != "b" {
		t.Errorf("want 5 of 3 after d was dialled: dialled %v, want c and b", got)
	}
	d.cfg.Want = 3
	if got := d.worthDialling(ranked); len(got) != 0 {
		t.Errorf("settled after d was dialled: dialled %v, want none", got)
	}
	d.cfg.Want = 9 // lacks 6 of 6 found: every one, d too
	if got := d.worthDialling(ranked); len(got) != 6 {
		t.Errorf("lacking more than found: dialled %d, want all 6", len(got))
	}
	d.cfg.Want = 8 // lacks 5 of 6: the five not dialled before d
	if got := d.worthDialling(ranked); len(got) != 5 || got[4].ID == "d" {
		t.Errorf("lacking 5 of 6 found: dialled %v, want the five other than d", got)
	}
}

// The pinger eases off: a connected peer is due every round until it has
// a full set of samples and this node's coordinate has settled, and then
// every SettledEvery rounds; a peer that left is forgotten.
func TestThePingerEasesOffSettledPeers(t *testing.T) {
	h, others := boundMocknet(t, 3, 100, 200)
	c := NewCoordinates()
	p := NewPinger(h, time.Second, nil)
	p.Track(c, Swarm{})
	a, b := others[0].ID(), others[1].ID()
	due := func(at time.Time) map[peer.ID]bool {
		out := map[peer.ID]bool{}
		for _, id := range p.due(at) {
			out[id] = true
		}
		return out
	}
	t0 := time.Now()
	for i := range rttSamples {
		c.Measured(a, 10*time.Millisecond, t0)
		if d := due(t0.Add(time.Duration(i) * time.Second)); !d[a] || !d[b] {
			t.Fatalf("round %d: due %v, want both (a unsettled node samples all)", i, d)
		}
	}
	settled := CoordToProto(c.Own())
	settled.Error = 0.2
	if err := c.SetOwn(settled); err != nil {
		t.Fatal(err)
	}
	last := t0.Add(2 * time.Second)
	for r := 3; r < 3+DefaultSettledEvery-1; r++ {
		if d := due(t0.Add(time.Duration(r) * time.Second)); d[a] || !d[b] {
			t.Errorf("round %d: due %v, want b (3 samples short) and not a (sampled at %s)", r, d, last.Sub(t0))
		}
	}
	if d := due(last.Add(DefaultSettledEvery * time.Second)); !d[a] {
		t.Errorf("%d rounds after its last sample: due %v, want a", DefaultSettledEvery, d)
	}
	h.Network().ClosePeer(b)
	p.due(t0.Add(10 * time.Second))
	p.mu.Lock()
	_, kept := p.last[b]
	p.mu.Unlock()
	if kept {
		t.Error("a peer that left is still remembered")
	}
}
