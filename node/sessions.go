package node

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxLeaseSessions bounds the sessions (commands run beside the job,
// forwarded connections) one lease holds open at once.
const maxLeaseSessions = 32

// session serves a renter's exec or port-forward into its running lease:
// only the lease's renter, only while the job runs, and never past the
// lease's end.
func (lo *leaseOwner) session(ctx context.Context, from peer.ID, req *pb.SessionRequest, s network.Stream) error {
	var ll *liveLease
	lo.do(ctx, func(st *leaseState) { ll = st.live[req.LeaseId] })
	if ll == nil || peer.ID(ll.lease.Renter) != from {
		return p2p.ReplySession(s, fmt.Sprintf("no running lease %s of yours here", req.LeaseId))
	}
	sx, ok := lo.exec.(executor.Sessions)
	if !ok {
		return p2p.ReplySession(s, fmt.Sprintf("this provider's executor (%s) cannot reach into a job", lo.exec.Name()))
	}
	if n := ll.sessions.Add(1); n > maxLeaseSessions {
		ll.sessions.Add(-1)
		return p2p.ReplySession(s, fmt.Sprintf("lease %s has %d sessions open already", req.LeaseId, maxLeaseSessions))
	}
	defer ll.sessions.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ll.off:
			cancel()
		case <-ctx.Done():
		}
	}()
	switch k := req.Kind.(type) {
	case *pb.SessionRequest_ForwardPort:
		c, err := sx.DialPort(ctx, req.LeaseId, int(k.ForwardPort))
		if err != nil {
			return p2p.ReplySession(s, fmt.Sprintf("port %d: %v", k.ForwardPort, err))
		}
		if err := p2p.ReplySession(s, ""); err != nil {
			c.Close()
			return err
		}
		p2p.Splice(ctx, s, c)
		return nil
	case *pb.SessionRequest_Exec:
		return lo.exec1(ctx, cancel, sx, req.LeaseId, k.Exec, s)
	case *pb.SessionRequest_Watch:
		if err := p2p.ReplySession(s, ""); err != nil {
			return err
		}
		// Held until the job ends, or the renter lets go.
		go func() {
			io.Copy(io.Discard, io.LimitReader(s, 1))
			cancel()
		}()
		<-ctx.Done()
		return nil
	}
	return p2p.ReplySession(s, "a session of no known kind")
}

// exec1 runs one command for a session: the renter's frames feed its
// input and its terminal's size; its output and exit code go back.
func (lo *leaseOwner) exec1(ctx context.Context, cancel context.CancelFunc, sx executor.Sessions, leaseID string, e *pb.ExecRequest, s network.Stream) error {
	if err := p2p.ReplySession(s, ""); err != nil {
		return err
	}
	stdout, stderr := p2p.NewExecWriters(s)
	resize := make(chan [2]uint, 1)
	var stdin io.Reader
	var pr *io.PipeReader
	var pw *io.PipeWriter
	if e.Stdin {
		pr, pw = io.Pipe()
		stdin = pr
	}
	go func() {
		// The renter gone (a reset, not the end of its frames) ends the
		// command's session.
		if err := p2p.ReadExecInput(s, pw, resize); err != nil && !errors.Is(err, io.EOF) {
			cancel()
		}
	}()
	code, err := sx.Exec(ctx, leaseID, executor.ExecSpec{
		Argv: e.Argv, TTY: e.Tty, Rows: uint(e.Rows), Cols: uint(e.Cols),
		Stdin: stdin, Stdout: stdout, Stderr: stderr, Resize: resize,
	})
	if pr != nil {
		pr.CloseWithError(io.ErrClosedPipe) // input that comes after the command is dropped
	}
	lo.log.Info("session command ended", "lease", leaseID, "argv0", e.Argv[0], "tty", e.Tty, "code", code, "err", err)
	return stdout.End(code, err)
}
