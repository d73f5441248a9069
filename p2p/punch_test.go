package p2p

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
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
