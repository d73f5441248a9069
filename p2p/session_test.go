package p2p

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A session request is checked before any handler sees it: a command
// line too long or empty, a port out of range, a request over
// MaxSessionRequest; a good one is handed over, and its exec frames
// carry output and the exit code back.
func TestSessionRequestsHaveBounds(t *testing.T) {
	a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int32
	ServeSessions(Server{Host: b, Ctx: ctx}, func(_ context.Context, _ peer.ID, req *pb.SessionRequest, s network.Stream) error {
		handled.Add(1)
		if err := ReplySession(s, ""); err != nil {
			return err
		}
		stdout, stderr := NewExecWriters(s)
		stdout.Write([]byte(strings.Repeat("o", 3*ExecChunk)))
		stderr.Write([]byte("e"))
		return stdout.End(7, nil)
	})
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	exec := func(argv ...string) *pb.SessionRequest {
		return &pb.SessionRequest{LeaseId: "l", Kind: &pb.SessionRequest_Exec{Exec: &pb.ExecRequest{Argv: argv}}}
	}
	for name, c := range map[string]struct {
		req  *pb.SessionRequest
		want string
	}{
		"no command":    {exec(), "exec: empty command"},
		"257 arguments": {exec(make([]string, MaxExecArgs+1)...), "257 arguments: want at most 256"},
		"port 0":        {&pb.SessionRequest{LeaseId: "l", Kind: &pb.SessionRequest_ForwardPort{}}, "forward_port: 0"},
		"port 70000":    {&pb.SessionRequest{LeaseId: "l", Kind: &pb.SessionRequest_ForwardPort{ForwardPort: 70000}}, "forward_port: 70000"},
		"no lease":      {&pb.SessionRequest{Kind: &pb.SessionRequest_Watch{Watch: true}}, "lease_id: empty"},
		"no kind":       {&pb.SessionRequest{LeaseId: "l"}, "no known kind"},
		"over 16 KiB":   {exec(strings.Repeat("x", MaxSessionRequest)), ""},
	} {
		_, err := OpenSession(ctx, a, Swarm{}, b.ID(), c.req)
		var refused *SessionRefusedError
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: accepted", name)
		case c.want != "" && (!errors.As(err, &refused) || !strings.Contains(refused.Reason, c.want)):
			t.Errorf("%s: %v, want a refusal saying %q", name, err, c.want)
		}
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("the handler saw %d bad requests", n)
	}
	s, err := OpenSession(ctx, a, Swarm{}, b.ID(), exec("true"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code, err := ReadExecOutput(s, &stdout, &stderr)
	if err != nil || code != 7 || stdout.Len() != 3*ExecChunk || stderr.String() != "e" {
		t.Errorf("exec frames: code %d, %v, %d bytes out, %q err", code, err, stdout.Len(), stderr.String())
	}
}

// A session whose reply is the work's outcome (an unpack, a pack) ends
// with that outcome over each transport: on QUIC the provider's close
// stops the renter's write side, which must not turn a done job into a
// failure.
func TestSessionWorkReturnsTheReplyOverEachTransport(t *testing.T) {
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			a, b := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ServeSessions(Server{Host: b, Ctx: ctx}, func(_ context.Context, _ peer.ID, req *pb.SessionRequest, s network.Stream) error {
				if req.GetPack().GetPath() == "/workspace/missing" {
					return ReplySession(s, "tar -c in the container exited with code 1")
				}
				return ReplySession(s, "")
			})
			connectOver(t, a, b, transport)
			pack := func(p string) *pb.SessionRequest {
				return &pb.SessionRequest{LeaseId: "l", Kind: &pb.SessionRequest_Pack{Pack: &pb.PackRequest{Path: p, Index: 64}}}
			}
			for i := range 20 { // the close raced the reply on most tries
				if err := SessionWork(ctx, a, Swarm{}, b.ID(), pack("/workspace/out"), 5*time.Second); err != nil {
					t.Fatalf("work %d done by the provider: %v", i, err)
				}
			}
			var refused *SessionRefusedError
			if err := SessionWork(ctx, a, Swarm{}, b.ID(), pack("/workspace/missing"), 5*time.Second); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "exited with code 1") {
				t.Errorf("work that failed: %v, want its reason", err)
			}
		})
	}
}
