package p2p

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const testProto protocol.ID = "/idlegrid/test-serve/1.0.0"

// echoRequest serves testProto: it reads a 16-byte request and answers ok.
func echoRequest(_ context.Context, _ peer.ID, s network.Stream) error {
	req := make([]byte, 16)
	if _, err := io.ReadFull(s, req); err != nil {
		return err
	}
	_, err := s.Write([]byte("ok"))
	return err
}

// open opens a test stream from a to b and writes n bytes of its request.
func open(t *testing.T, a, b host.Host, n int) network.Stream {
	t.Helper()
	s, err := a.NewStream(context.Background(), b.ID(), testProto)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	return s
}

// reply reads what the server sent on s until it closed or reset it,
// within d.
func reply(s network.Stream, d time.Duration) (string, error) {
	s.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(s)
	return string(b), err
}

func TestServeResetsAStalledRequestAtTheRequestDeadline(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	lim := StreamLimits{Service: "idlegrid.test", Memory: 4096, Request: 300 * time.Millisecond, Deadline: 20 * time.Second, PerPeer: 4}
	Server{Host: b, Ctx: context.Background()}.Serve(testProto, lim, echoRequest)

	if got, err := reply(open(t, a, b, 16), 5*time.Second); got != "ok" || err != nil {
		t.Fatalf("a whole request: %q, %v", got, err)
	}
	// Slowloris: one byte, then nothing. The stream is reset at the
	// request deadline, long before the exchange's own.
	start := time.Now()
	_, err := reply(open(t, a, b, 1), 10*time.Second)
	took := time.Since(start)
	if err == nil || took < lim.Request || took > 3*time.Second {
		t.Errorf("a request stalled after one byte ended after %s with %v; want a reset at about %s", took, err, lim.Request)
	}
}

func TestServeHoldsOnePeerToItsShare(t *testing.T) {
	a, b, c := newTestHost(t, nil, nil), newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	for _, h := range []host.Host{a, c} {
		if err := connect(h, b); err != nil {
			t.Fatal(err)
		}
	}
	lim := StreamLimits{Service: "idlegrid.test", Memory: 4096, Request: 20 * time.Second, Deadline: 30 * time.Second, PerPeer: 2}
	Server{Host: b, Ctx: context.Background()}.Serve(testProto, lim, echoRequest)

	// a holds its two streams with stalled requests; wait until the
	// server holds both, then a third is reset at once.
	held := []network.Stream{open(t, a, b, 1), open(t, a, b, 1)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		_, err := reply(open(t, a, b, 16), 5*time.Second)
		if err != nil && time.Since(start) < time.Second {
			break // refused at once: a is at its share
		}
		if time.Now().After(deadline) {
			t.Fatalf("a third stream of a peer holding two was not refused: %v", err)
		}
	}
	// Another peer is served meanwhile.
	if got, err := reply(open(t, c, b, 16), 5*time.Second); got != "ok" || err != nil {
		t.Errorf("another peer while a holds its share: %q, %v", got, err)
	}
	// Once a lets one go, it is served again.
	held[0].Reset()
	for {
		if got, _ := reply(open(t, a, b, 16), 5*time.Second); got == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a was not served again after letting a stream go")
		}
	}
	held[1].Reset()
}

func TestServeRecoversAPanicAndEndsHandlersWithItsContext(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	lim := StreamLimits{Service: "idlegrid.test", Request: time.Second, Deadline: time.Minute, PerPeer: 8}
	ended := make(chan struct{})
	Server{Host: b, Ctx: ctx}.Serve(testProto, lim, func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := make([]byte, 1)
		if _, err := io.ReadFull(s, req); err != nil {
			return err
		}
		switch req[0] {
		case 'p':
			panic("a handler bug")
		case 'w':
			<-ctx.Done()
			close(ended)
			return ctx.Err()
		}
		_, err := s.Write([]byte("ok"))
		return err
	})
	write := func(c byte) network.Stream {
		s := open(t, a, b, 0)
		s.Write([]byte{c})
		return s
	}
	if _, err := reply(write('p'), 5*time.Second); err == nil {
		t.Error("a panicking handler's stream was not reset")
	}
	if got, err := reply(write('o'), 5*time.Second); got != "ok" || err != nil {
		t.Errorf("after a panic: %q, %v", got, err)
	}
	waiting := write('w')
	stop()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("a handler waiting on its context outlived the server's")
	}
	if _, err := reply(waiting, 5*time.Second); err == nil {
		t.Error("the stream of a handler that failed was not reset")
	}
}
