package p2p

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/test"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
)

// A host judges a peer's hole punch missed only for connections that
// predate its own DCUtR service: one opened just after the service began
// (a fresh rent's first relayed connection, whose punch may be under way)
// is kept. The host knows the moment from its event bus, so "after" is
// after that event's delivery, which the test waits for: on a busy
// machine the delivery can come later than a loopback connection.
func TestOnlyAConnectionOlderThanDCUtRHasMissedItsPunch(t *testing.T) {
	h, older, newer := newTestHost(t, nil, nil), newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	ph := newPunchingHost(h)
	t.Cleanup(ph.stop)
	if err := connect(h, older); err != nil {
		t.Fatal(err)
	}
	// What the hole punching service does once it has a public address.
	h.SetStreamHandler(holepunch.Protocol, func(s network.Stream) { s.Reset() })
	<-ph.ready
	if err := connect(h, newer); err != nil {
		t.Fatal(err)
	}
	if !ph.missedPunch(h, older.ID()) {
		t.Error("a connection opened before DCUtR was served: not judged missed")
	}
	if ph.missedPunch(h, newer.ID()) {
		t.Error("a connection opened after DCUtR was served: judged missed, and would be closed")
	}
}

// Both ends of a hole punch reach the same choice of transport: QUIC
// alone where each sent the other a QUIC address, every address where
// either has none; and the filter forgets punches that never finish.
func TestBothEndsOfAHolePunchDialTheSameOneTransport(t *testing.T) {
	tcp, quic := ma.StringCast("/ip4/11.0.0.2/tcp/4001"), ma.StringCast("/ip4/11.0.0.2/udp/4001/quic-v1")
	tcp3, quic3 := ma.StringCast("/ip4/11.0.0.3/tcp/4001"), ma.StringCast("/ip4/11.0.0.3/udp/4001/quic-v1")
	a, b := test.RandPeerIDFatal(t), test.RandPeerIDFatal(t)
	// punch runs one punch between an end at a with addresses as and an
	// end at b with bs: each sends its own, then filters the other's. It
	// returns what each end dials.
	punch := func(as, bs []ma.Multiaddr) (aDials, bDials []ma.Multiaddr) {
		fa, fb := newOneTransport(), newOneTransport()
		sentA, sentB := fa.FilterLocal(b, as), fb.FilterLocal(a, bs)
		return fa.FilterRemote(b, sentB), fb.FilterRemote(a, sentA)
	}
	for _, c := range []struct {
		name           string
		as, bs         []ma.Multiaddr
		aDials, bDials []ma.Multiaddr
	}{
		{"both have both", []ma.Multiaddr{tcp, quic}, []ma.Multiaddr{tcp3, quic3}, []ma.Multiaddr{quic3}, []ma.Multiaddr{quic}},
		{"one has TCP alone", []ma.Multiaddr{tcp, quic}, []ma.Multiaddr{tcp3}, []ma.Multiaddr{tcp3}, []ma.Multiaddr{tcp, quic}},
		{"both have QUIC alone", []ma.Multiaddr{quic}, []ma.Multiaddr{quic3}, []ma.Multiaddr{quic3}, []ma.Multiaddr{quic}},
		{"both have TCP alone", []ma.Multiaddr{tcp}, []ma.Multiaddr{tcp3}, []ma.Multiaddr{tcp3}, []ma.Multiaddr{tcp}},
	} {
		aDials, bDials := punch(c.as, c.bs)
		if !slices.EqualFunc(aDials, c.aDials, ma.Multiaddr.Equal) || !slices.EqualFunc(bDials, c.bDials, ma.Multiaddr.Equal) {
			t.Errorf("%s: a dials %v and b dials %v, want %v and %v", c.name, aDials, bDials, c.aDials, c.bDials)
		}
	}

	// The first half of a punch with no second half (the peer never
	// answered) leaves nothing past the bound.
	f := newOneTransport()
	for range punchFilterMax + 10 {
		f.FilterLocal(test.RandPeerIDFatal(t), []ma.Multiaddr{tcp, quic})
	}
	if n := len(f.sent); n > punchFilterMax {
		t.Errorf("%d punches remembered, want at most %d", n, punchFilterMax)
	}
	// What was sent to a peer is forgotten once its answer is filtered.
	f.FilterLocal(a, []ma.Multiaddr{tcp, quic})
	f.FilterRemote(a, []ma.Multiaddr{tcp3, quic3})
	if got := f.FilterRemote(a, []ma.Multiaddr{tcp3, quic3}); len(got) != 2 {
		t.Errorf("a second answer with no punch of its own: dials %v, want both addresses", got)
	}
}
