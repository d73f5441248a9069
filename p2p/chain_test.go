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
	readRequest := func(s network.Stream) error { _, _, err := readChainRequest(s); return err }
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		return FetchChain(ctx, a, Swarm{}, b, 1, each)
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
	var asked uint64
	var limit int
	ServeChain(Server{Host: b, Ctx: ctx}, func(_ context.Context, from uint64, n int) ([][]byte, error) {
		asked, limit = from, n
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte{byte(i)}
		}
		out[10] = bytes.Repeat([]byte{'x'}, MaxChainEntrySize+1) // ends the answer
		return out, nil
	})
	var got [][]byte
	n, err := FetchChain(ctx, a, Swarm{}, b.ID(), 7, func(e []byte) { got = append(got, e) })
	if err != nil || n != 10 || asked != 7 || limit != MaxChainReply {
		t.Errorf("served %d entries (%v) from %d, at most %d; want 10 from 7, at most %d", n, err, asked, limit, MaxChainReply)
	}
	for i, e := range got {
		if len(e) != 1 || e[0] != byte(i) {
			t.Fatalf("entry %d is %v: not in order", i, e)
		}
	}
}
