package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/idlegrid/idlegrid/market"
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
func (lo *Owner) session(ctx context.Context, from peer.ID, req *pb.SessionRequest, s network.Stream) error {
	var ll *liveLease
	lo.Do(ctx, func(st *State) { ll = st.Live[req.LeaseId] })
	if ll == nil || peer.ID(ll.lease.Renter) != from {
		return p2p.ReplySession(s, fmt.Sprintf("no running lease %s of yours here", req.LeaseId))
	}
	sx, ok := lo.Exec.(executor.Sessions)
	if !ok {
		return p2p.ReplySession(s, fmt.Sprintf("this provider's executor (%s) cannot reach into a job", lo.Exec.Name()))
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
	case *pb.SessionRequest_Unpack:
		return p2p.ReplySession(s, errText(lo.unpack(ctx, sx, from, req.LeaseId, k.Unpack)))
	case *pb.SessionRequest_Pack:
		return p2p.ReplySession(s, errText(lo.pack(ctx, sx, from, req.LeaseId, k.Pack)))
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
func (lo *Owner) exec1(ctx context.Context, cancel context.CancelFunc, sx executor.Sessions, leaseID string, e *pb.ExecRequest, s network.Stream) error {
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

// errText is err's text, empty for none: a session reply.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// unpack puts a tar the renter uploaded into its running job (idlegrid
// cp in), then forgets the tar.
func (lo *Owner) unpack(ctx context.Context, sx executor.Sessions, from peer.ID, leaseID string, in *pb.Input) error {
	if lo.stage == nil {
		return errors.New("this provider takes no uploads (jobs.max_upload_mib = 0)")
	}
	if err := market.ValidateInputs([]*pb.Input{in}); err != nil {
		return err
	}
	st, err := lo.stage.Get(from, in.Sha256, int64(in.Size))
	if err != nil {
		return err
	}
	f, err := os.Open(st.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := executor.UnpackTar(ctx, sx, leaseID, path.Dir(in.Path), f); err != nil {
		return err
	}
	lo.stage.Remove(from, in.Sha256)
	return nil
}

// pack packs a path of the renter's running job into the stage, as an
// output of its lease for it to download (idlegrid cp out).
func (lo *Owner) pack(ctx context.Context, sx executor.Sessions, from peer.ID, leaseID string, pr *pb.PackRequest) error {
	switch {
	case lo.stage == nil:
		return errors.New("this provider keeps nothing to download (jobs.max_upload_mib = 0)")
	case pr.Index < market.MaxOutputs:
		return fmt.Errorf("pack index %d: want %d or more (below are the workload's outputs)", pr.Index, market.MaxOutputs)
	}
	if err := market.ValidateOutputs([]string{pr.Path}); err != nil {
		return err
	}
	return executor.PackTar(ctx, sx, leaseID, pr.Path, func(tar io.Reader) error {
		return lo.stage.PutOutput(from, leaseID, int(pr.Index), tar)
	})
}
