package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
)

// A peer that answers a receipts request with whatever it likes gets no
// more than the caps read: receipts of at most MaxReceiptSize bytes, at
// most MaxReceiptsReply of them; and a server answers a request for one
// subject with what its source holds of that subject, capped.
func TestReceiptsExchangeHoldsItsCaps(t *testing.T) {
	readRequest := func(s network.Stream) error { _, _, err := readReceiptsRequest(s); return err }
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		return FetchReceipts(ctx, a, Swarm{}, b, b, each)
	}
	checkCaps(t, ReceiptsProtocol, readRequest, fetch, []capCase{
		{"oversized receipts", 10, MaxReceiptSize + 1, 0, "message"},
		{"too many receipts", MaxReceiptsReply + 10, 16, MaxReceiptsReply, "more than 256 receipts"},
		{"a whole history", 100, 600, 100, ""},
	})
	t.Run("served", func(t *testing.T) {
		a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
		if err := connect(a, b); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var asked peer.ID
		ServeReceipts(Server{Host: b, Ctx: ctx}, func(_ context.Context, s peer.ID) ([][]byte, error) {
			asked = s
			out := make([][]byte, 300) // more than one answer carries
			for i := range out {
				out[i] = []byte{byte(i)}
			}
			out[0] = bytes.Repeat([]byte{'x'}, MaxReceiptSize+1) // never sent
			return out, nil
		})
		got := 0
		n, err := FetchReceipts(ctx, a, Swarm{}, b.ID(), a.ID(), func([]byte) { got++ })
		if err != nil || n != MaxReceiptsReply-1 || asked != a.ID() {
			t.Errorf("served %d receipts (%v) for %s; want %d for %s", n, err, asked, MaxReceiptsReply-1, a.ID())
		}
	})
}

// Whatever a peer answers, the reader hands on no more than the caps.
func FuzzReadReceipts(f *testing.F) {
	var answer bytes.Buffer
	w := msgio.NewVarintWriter(&answer)
	w.WriteMsg([]byte("receipt"))
	f.Add(answer.Bytes())
	f.Add(binary.AppendUvarint(nil, 1<<40))
	f.Fuzz(func(t *testing.T, data []byte) {
		calls, total := 0, 0
		n, _ := readReceipts(bytes.NewReader(data), func(rc []byte) {
			calls++
			total += len(rc)
			if len(rc) > MaxReceiptSize {
				t.Fatalf("a receipt of %d bytes handed on", len(rc))
			}
		})
		if n != calls || n > MaxReceiptsReply || total > len(data) {
			t.Fatalf("readReceipts said %d, handed on %d of %d bytes from %d bytes", n, calls, total, len(data))
		}
	})
}

// Whatever a peer asks with, the server reads a peer ID and a count, or
// an error, and never more than the request.
func FuzzReadReceiptsRequest(f *testing.F) {
	id := peer.ID("\x00\x24\x08\x01\x12\x20" + strings.Repeat("k", 32))
	req := binary.AppendUvarint(nil, uint64(len(id)))
	req = binary.AppendUvarint(append(req, id...), MaxReceiptsReply)
	f.Add(req)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		subject, _, err := readReceiptsRequest(bytes.NewReader(data))
		if err == nil && (len(subject) == 0 || len(subject) > 128) {
			t.Fatalf("read a subject of %d bytes", len(subject))
		}
	})
}

// Evidence sync reads no more than its caps from a peer that answers
// with whatever it likes.
func TestFetchEvidenceReadsNoMoreThanItsCaps(t *testing.T) {
	readNothing := func(s network.Stream) error { _, err := io.Copy(io.Discard, s); return err }
	fetch := func(ctx context.Context, a host.Host, b peer.ID, each func([]byte)) (int, error) {
		return FetchEvidence(ctx, a, Swarm{}, b, each)
	}
	checkCaps(t, EvidenceSyncProtocol, readNothing, fetch, []capCase{
		{"oversized evidence", 5, attest.MaxEvidenceSize + 1, 0, "message"},
		{"too much evidence", MaxSyncEvidence + 10, 16, MaxSyncEvidence, "more than 1000 pieces of evidence"},
		{"every offender", 20, 500, 20, ""},
	})
}

// BenchmarkPullReceiptsOf50Providers measures what a fresh renter pulls
// to rank the 50 best offers by their providers' records: from each
// provider, the receipts it holds of itself, at the cap of 256 co-signed
// receipts of 360 bytes (the size of a real one), over loopback; beside,
// in the same run, a book sync of those 50 offers (700 bytes each) from
// one peer.
//
//	go test ./p2p -run '^$' -bench PullReceiptsOf50Providers -benchtime 20x
func BenchmarkPullReceiptsOf50Providers(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	receipts := make([][]byte, MaxReceiptsReply)
	for i := range receipts {
		receipts[i] = bytes.Repeat([]byte{byte(i)}, 360)
	}
	offers := make([][]byte, 50)
	for i := range offers {
		offers[i] = bytes.Repeat([]byte{byte(i)}, 700)
	}
	client := newTestHost(b, nil, nil)
	var provs []host.Host
	for range 50 {
		h := newTestHost(b, nil, nil)
		ServeReceipts(Server{Host: h, Ctx: ctx}, func(context.Context, peer.ID) ([][]byte, error) { return receipts, nil })
		ServeBookSync(Server{Host: h, Ctx: ctx}, func(context.Context) ([][]byte, error) { return offers, nil })
		if err := connect(client, h); err != nil {
			b.Fatal(err)
		}
		provs = append(provs, h)
	}
	var pulled int
	var pull, sync time.Duration
	for i := range b.N {
		t0 := time.Now()
		if _, err := FetchBook(ctx, client, Swarm{}, provs[i%len(provs)].ID(), nil, func([]byte) {}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		pulled = 0
		for _, p := range provs {
			if _, err := FetchReceipts(ctx, client, Swarm{}, p.ID(), p.ID(), func(rc []byte) { pulled += len(rc) + 2 }); err != nil {
				b.Fatal(err)
			}
		}
		sync, pull = sync+t1.Sub(t0), pull+time.Since(t1)
	}
	b.ReportMetric(float64(pulled), "bytes-pulled")
	b.ReportMetric(float64(pull.Milliseconds())/float64(b.N), "ms/pull")
	b.ReportMetric(float64(sync.Microseconds())/1000/float64(b.N), "ms/book-sync-of-50")
	b.ReportMetric(float64(pull)/float64(sync), "x-book-sync")
}
