package p2p

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
)

func TestTheExchangeProtocolIsHeldToItsPeersBound(t *testing.T) {
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			server := newTestHost(t, nil, nil)
			// The flooding peer bounds nothing of its own.
			client, err := libp2p.New(libp2p.NoListenAddrs, libp2p.ResourceManager(&network.NullResourceManager{}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			proto := Swarm{Name: "test"}.ExchangeProtocol()
			arrived := make(chan struct{}, 64)
			server.SetStreamHandler(proto, func(s network.Stream) {
				arrived <- struct{}{}
				io.Copy(io.Discard, s)
				s.Close()
			})
			connectOver(t, client, server, transport)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			open := func() network.Stream {
				s, err := client.NewStream(ctx, server.ID(), proto)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Reset() })
				if _, err := s.Write([]byte{0}); err != nil {
					t.Fatal(err)
				}
				return s
			}
			for i := range int(ExchangePeerLimit.StreamsInbound) {
				open()
				select {
				case <-arrived:
				case <-ctx.Done():
					t.Fatalf("stream %d of %d within the bound was not served", i+1, ExchangePeerLimit.StreamsInbound)
				}
			}
			// One past the bound is reset, never served.
			s := open()
			s.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := s.Read(make([]byte, 1)); err == nil || err == io.EOF {
				t.Fatalf("a stream past the peer's bound of %d: read %v, want it reset", ExchangePeerLimit.StreamsInbound, err)
			}
			select {
			case <-arrived:
				t.Fatal("a stream past the peer's bound was served")
			default:
			}
		})
	}
}
