package p2p

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-msgio"
)

// An image's bytes sent as ImageChunks over a loopback libp2p stream
// (QUIC; TCP with Noise and yamux), beside the same bytes copied over a
// loopback TCP socket, in the same run:
//
//	go test ./p2p -run '^$' -bench ImageChunks -benchtime 4x
func BenchmarkImageChunks(b *testing.B) {
	b.Run("quic", func(b *testing.B) { benchImageChunks(b, false) })
	b.Run("tcp", func(b *testing.B) { benchImageChunks(b, true) })
}

func benchImageChunks(b *testing.B, tcpOnly bool) {
	const size = 256 << 20
	a, p := newTestHost(b, nil, nil), newTestHost(b, nil, nil)
	got := make(chan int64, 1)
	p.SetStreamHandler(Swarm{}.Protocol(ImageProtocol), func(s network.Stream) {
		n, _ := io.Copy(io.Discard, &chunkReader{r: msgio.NewVarintReaderSize(s, MaxImageChunk+64)})
		s.Close()
		got <- n
	})
	addrs := p.Addrs()
	if tcpOnly {
		addrs = slices.DeleteFunc(slices.Clone(addrs), IsQUIC)
	}
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: p.ID(), Addrs: addrs}); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			got <- n
		}
	}()
	var viaStream, viaSocket time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s, err := a.NewStream(context.Background(), p.ID(), Swarm{}.Protocol(ImageProtocol))
		if err != nil {
			b.Fatal(err)
		}
		w := msgio.NewVarintWriter(s)
		if _, err := io.Copy(chunkWriter{w}, io.LimitReader(zeros{}, size)); err != nil {
			b.Fatal(err)
		}
		end := []byte{} // an empty ImageChunk marshals to nothing
		w.WriteMsg(end)
		s.CloseWrite()
		if n := <-got; n != size {
			b.Fatalf("stream carried %d bytes", n)
		}
		s.Close()
		t1 := time.Now()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(c, io.LimitReader(zeros{}, size))
		c.Close()
		if n := <-got; n != size {
			b.Fatalf("socket carried %d bytes", n)
		}
		viaStream, viaSocket = viaStream+t1.Sub(t0), viaSocket+time.Since(t1)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(mbps(viaStream), "stream-MiB/s")
	b.ReportMetric(mbps(viaSocket), "socket-MiB/s")
	b.ReportMetric(viaSocket.Seconds()/viaStream.Seconds(), "stream/socket")
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
