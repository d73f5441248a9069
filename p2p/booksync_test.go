package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// Issue 11, attack 6: a peer handed a joining node 3,000 offers of 60 KB,
// and one sync returned 529 MB. A sync now reads envelopes of at most
// market.MaxEnvelopeSize, MaxSyncOffers of them, MaxSyncBytes in all,
// from a server that sends whatever it likes.
func TestFetchBookReadsNoMoreThanItsCaps(t *testing.T) {
	readCount := func(s network.Stream) error { _, err := binary.ReadUvarint(byteReader{s}); return err }
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		return FetchBook(ctx, a, Swarm{}, b, nil, each)
	}
	checkCaps(t, BookSyncProtocol, readCount, fetch, []capCase{
		{"oversized envelopes", 3000, 60 << 10, 0, "message"},
		{"too many envelopes", MaxSyncOffers + 10, 16, MaxSyncOffers, "more than 20000 offers"},
		{"too many bytes", 4000, 8 << 10, MaxSyncBytes / (8 << 10), "bytes"},
		{"a whole book", 100, 300, 100, ""},
	})
}

// capCase is a hostile answer: n messages of size bytes; the reader must
// hand on at most most of them and fail with an error naming errIn ("":
// no error).
type capCase struct {
	name    string
	n, size int
	most    int
	errIn   string
}

// checkCaps serves each case's answer on protocol id to a request read
// by readRequest, whatever the request's bound, and checks what fetch
// hands on.
func checkCaps(t *testing.T, id protocol.ID, readRequest func(network.Stream) error, fetch func(context.Context, host.Host, peer.ID, func([]byte)) (int, error), cases []capCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
			if err := connect(a, b); err != nil {
				t.Fatal(err)
			}
			b.SetStreamHandler(Swarm{}.Protocol(id), func(s network.Stream) {
				defer s.Close()
				if readRequest(s) != nil {
					return
				}
				w := msgio.NewVarintWriter(s)
				msg := bytes.Repeat([]byte{'x'}, c.size)
				for range c.n {
					if w.WriteMsg(msg) != nil {
						return
					}
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := 0
			n, err := fetch(ctx, a, b.ID(), func([]byte) { got++ })
			if got > c.most || n != got {
				t.Errorf("handed on %d messages (counted %d); want at most %d", got, n, c.most)
			}
			if c.errIn == "" && err != nil || c.errIn != "" && (err == nil || !strings.Contains(err.Error(), c.errIn)) {
				t.Errorf("err %v, want one naming %q", err, c.errIn)
			}
		})
	}
}

// Whatever a peer answers a sync with, the reader hands on no more than
// the caps allow, each envelope within market.MaxEnvelopeSize.
func FuzzReadBook(f *testing.F) {
	var answer bytes.Buffer
	w := msgio.NewVarintWriter(&answer)
	for _, env := range [][]byte{[]byte("offer one"), bytes.Repeat([]byte{7}, 300)} {
		if err := w.WriteMsg(env); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(answer.Bytes())
	f.Add(binary.AppendUvarint(nil, 1<<40))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		calls, total := 0, 0
		n, _ := readBook(bytes.NewReader(data), func(env []byte) {
			calls++
			total += len(env)
			if len(env) > market.MaxEnvelopeSize {
				t.Fatalf("an envelope of %d bytes handed on", len(env))
			}
		})
		if n != calls || n > MaxSyncOffers || total > MaxSyncBytes || total > len(data) {
			t.Fatalf("readBook said %d, handed on %d envelopes of %d bytes from %d bytes", n, calls, total, len(data))
		}
	})
}
