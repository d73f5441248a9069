package p2p

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// An HTTP request through a port-forward (a new TCP connection to the
// renter's listener, a session stream across two loopback hosts, and a
// connection to the server) beside the same request on a direct
// connection to the server, in the same run:
//
//	go test ./p2p -run '^$' -bench PortForward -benchtime 2000x
func BenchmarkPortForward(b *testing.B) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(sl)
	defer srv.Close()

	// The per-peer rate holds a renter to ten new connections a second:
	// lifted here, where one renter makes thousands.
	defer func(l StreamLimits) { SessionLimits = l }(SessionLimits)
	SessionLimits.Rate = Rate{}
	a, p := newTestHost(b, nil, nil), newTestHost(b, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ServeSessions(Server{Host: p, Ctx: ctx}, func(ctx context.Context, _ peer.ID, _ *pb.SessionRequest, s network.Stream) error {
		c, err := net.Dial("tcp", sl.Addr().String())
		if err != nil {
			return ReplySession(s, err.Error())
		}
		if err := ReplySession(s, ""); err != nil {
			return err
		}
		Splice(ctx, s, c)
		return nil
	})
	if err := connect(a, p); err != nil {
		b.Fatal(err)
	}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer fl.Close()
	go func() {
		for {
			c, err := fl.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := OpenSession(ctx, a, Swarm{}, p.ID(), &pb.SessionRequest{LeaseId: "l", Kind: &pb.SessionRequest_ForwardPort{ForwardPort: 1}})
				if err != nil {
					b.Log(err)
					c.Close()
					return
				}
				Splice(ctx, s, c)
			}()
		}
	}()
	get := func(addr string) error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprint(c, "GET / HTTP/1.0\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	var direct, forwarded time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := get(sl.Addr().String()); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := get(fl.Addr().String()); err != nil {
			b.Fatal(err)
		}
		direct, forwarded = direct+t1.Sub(t0), forwarded+time.Since(t1)
	}
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "direct-µs/req")
	b.ReportMetric(float64(forwarded.Microseconds())/float64(b.N), "forwarded-µs/req")
	b.ReportMetric(float64(forwarded)/float64(direct), "forwarded/direct")
}
