package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// BenchmarkAnswerBuffer times an answer of 1,000 offers of 512 bytes over
// loopback TCP and QUIC, read as a book sync reads it: written through
// writeAnswer (writes of up to AnswerBuffer), and as the reference in the
// same run, one stream write an offer (what every server did before).
// It reports the time to read the answer per offer, both ways, and their
// ratio.
//
//	go test ./p2p -run '^$' -bench AnswerBuffer -benchtime 200x
func BenchmarkAnswerBuffer(b *testing.B) {
	const offers = 1000
	book := make([][]byte, offers)
	for i := range book {
		book[i] = make([]byte, 512)
		book[i][0] = byte(i)
	}
	each := func(w msgio.Writer) error {
		for _, env := range book {
			if err := w.WriteMsg(env); err != nil {
				return err
			}
		}
		return nil
	}
	for _, transport := range []string{"tcp", "quic-v1"} {
		b.Run(transport, func(b *testing.B) {
			server, asker := newTestHost(b, nil, nil), newTestHost(b, nil, nil)
			server.SetStreamHandler("/bench/buffered", func(s network.Stream) {
				if writeAnswer(s, each) != nil {
					s.Reset()
					return
				}
				s.Close()
			})
			server.SetStreamHandler("/bench/unbuffered", func(s network.Stream) {
				if each(msgio.NewVarintWriter(s)) != nil {
					s.Reset()
					return
				}
				s.Close()
			})
			connectOver(b, asker, server, transport)
			fetch := func(proto string) time.Duration {
				start := time.Now()
				s, err := asker.NewStream(context.Background(), server.ID(), protocol.ID("/bench/"+proto))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				s.CloseWrite()
				if n, err := readBook(s, func([]byte) {}); err != nil || n != offers {
					b.Fatalf("%s: %d offers (%v), want %d", proto, n, err, offers)
				}
				return time.Since(start)
			}
			var buffered, unbuffered time.Duration
			for range b.N {
				buffered += fetch("buffered")
				unbuffered += fetch("unbuffered")
			}
			b.ReportMetric(float64(buffered.Nanoseconds())/float64(b.N*offers), "ns/offer")
			b.ReportMetric(float64(unbuffered.Nanoseconds())/float64(b.N*offers), "ns/offer-unbuffered")
			b.ReportMetric(float64(buffered)/float64(unbuffered), "buffered/unbuffered")
			b.ReportMetric(0, "ns/op")
		})
	}
}
