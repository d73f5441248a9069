package p2p

import (
	"bytes"
	"context"
	"testing"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A peer that answers a chain request with whatever it likes gets no
// more than the caps read; a server answers from the seq asked, at most
// MaxChainReply entries, and ends its answer before an entry it may not
// send rather than leave a hole in it.
func TestChainExchangeHoldsItsCaps(t *testing.T) {
	readRequest := func(s network.Stream) error { _, err := readChainRequest(s); return err }
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		return FetchChain(ctx, a, Swarm{}, b, ChainQuery{From: 1}, each)
	}
	checkCaps(t, ChainProtocol, readRequest, fetch, []capCase{
		{"an oversized entry", 3, MaxChainEntrySize + 1, 0, "message"},
		{"too many entries", MaxChainReply + 5, 16, MaxChainReply, "more than 64 chain entries"},
		{"too many bytes", 2 * MaxChainBytes / MaxChainEntrySize, MaxChainEntrySize, MaxChainBytes / MaxChainEntrySize, "more than 1048576 bytes"},
		{"a whole chain", 30, 2000, 30, ""},
	})
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run("served over "+transport, func(t *testing.T) { testChainServed(t, transport) })
	}
}

func testChainServed(t *testing.T, transport string) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	connectOver(t, a, b, transport)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked ChainQuery
	ServeChain(Server{Host: b, Ctx: ctx}, func(_ context.Context, q ChainQuery) ([][]byte, error) {
		asked = q
		out := make([][]byte, q.Want)
		for i := range out {
			out[i] = []byte{byte(i)}
		}
		out[min(10, len(out)-1)] = bytes.Repeat([]byte{'x'}, MaxChainEntrySize+1) // ends the answer
		return out, nil
	})
	var got [][]byte
	n, err := FetchChain(ctx, a, Swarm{}, b.ID(), ChainQuery{From: 7}, func(e []byte) { got = append(got, e) })
	if err != nil || n != 10 || asked != (ChainQuery{From: 7, Want: MaxChainReply}) {
		t.Errorf("served %d entries (%v) for %+v; want 10 for seq 7 on, at most %d, about no one", n, err, asked, MaxChainReply)
	}
	for i, e := range got {
		if len(e) != 1 || e[0] != byte(i) {
			t.Fatalf("entry %d is %v: not in order", i, e)
		}
	}
	// The newest few, of leases with one peer.
	q := ChainQuery{Want: 5, About: a.ID()}
	if n, err := FetchChain(ctx, a, Swarm{}, b.ID(), q, func([]byte) {}); err != nil || n != 4 || asked != q {
		t.Errorf("asked %+v, served %+v: %d entries (%v)", q, asked, n, err)
	}
}

// A chain request's counterparty must be a peer ID, of at most 128 bytes.
func TestChainRequestsNameAPeer(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  []byte
		ok   bool
	}{
		{"none", []byte{1, 64}, true},
		{"none, said", []byte{1, 64, 0}, true},
		{"a peer", appendPeerID([]byte{0, 16}, "\x00\x04idid"), true},
		{"not a peer ID", append([]byte{1, 64, 3}, "abc"...), false},
		{"too long", append([]byte{1, 64, 200, 1}, bytes.Repeat([]byte{0}, 200)...), false},
		{"cut short", []byte{1, 64, 9, 1}, false},
	} {
		q, err := readChainRequest(bytes.NewReader(tc.req))
		if (err == nil) != tc.ok {
			t.Errorf("%s: %+v, %v", tc.name, q, err)
		}
	}
}
