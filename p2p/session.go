package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// SessionProtocol reaches into a running lease's container for its
// renter: a command run beside the job (idlegrid exec), or a TCP port in
// it (idlegrid port-forward). The renter sends one SessionRequest, the
// provider one SessionReply; then ExecInput and ExecOutput frames, or a
// forwarded connection's bytes.
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const SessionProtocol protocol.ID = "/idlegrid/session/1.0.0"

// Bounds of the session protocol.
const (
	// MaxSessionRequest bounds a request: a command line of at most
	// MaxExecArgs arguments.
	MaxSessionRequest = 16 << 10
	MaxExecArgs       = 256
	// MaxSessionFrame bounds one exec frame; output goes in chunks of
	// at most ExecChunk.
	MaxSessionFrame = 64 << 10
	ExecChunk       = 32 << 10
	sessionDeadline = 15 * time.Second
)

// SessionLimits bound the session server: a browser opens a few
// connections at once through a forwarded port, each a stream. A session
// lives as long as its lease's job, which the handler enforces.
var SessionLimits = StreamLimits{
	Service: "idlegrid.session", Memory: 2 * MaxSessionFrame,
	Request: requestDeadline, PerPeer: 32, Rate: Rate{10, 50},
}

// SessionHandler serves one session; it owns s until it returns. Its
// first write must be the reply (see ReplySession).
type SessionHandler func(ctx context.Context, from peer.ID, req *pb.SessionRequest, s network.Stream) error

// ServeSessions hands each well-formed session request to handle.
func ServeSessions(sv Server, handle SessionHandler) {
	sv.Serve(SessionProtocol, SessionLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		req := new(pb.SessionRequest)
		if err := ReadMsg(s, MaxSessionRequest, req); err != nil {
			return err
		}
		if why := checkSession(req); why != "" {
			return WriteMsg(s, &pb.SessionReply{Refused: why})
		}
		s.SetReadDeadline(time.Time{})
		return handle(ctx, from, req, s)
	})
}

// checkSession says what is wrong with a request, or "".
func checkSession(req *pb.SessionRequest) string {
	switch k := req.Kind.(type) {
	case *pb.SessionRequest_Exec:
		switch n := len(k.Exec.GetArgv()); {
		case n == 0:
			return "exec: empty command"
		case n > MaxExecArgs:
			return fmt.Sprintf("exec: %d arguments: want at most %d", n, MaxExecArgs)
		}
	case *pb.SessionRequest_ForwardPort:
		if k.ForwardPort == 0 || k.ForwardPort > 65535 {
			return fmt.Sprintf("forward_port: %d: want 1 to 65535", k.ForwardPort)
		}
	case *pb.SessionRequest_Watch:
	case *pb.SessionRequest_Unpack:
		if len(k.Unpack.GetSha256()) != 32 || k.Unpack.GetSize() == 0 {
			return "unpack: want a tar's SHA-256 and size"
		}
	case *pb.SessionRequest_Pack:
		if k.Pack.GetPath() == "" {
			return "pack: empty path"
		}
	default:
		return "a session of no known kind"
	}
	if req.LeaseId == "" {
		return "lease_id: empty"
	}
	return ""
}

// ReplySession accepts a session (why empty) or refuses it.
func ReplySession(s network.Stream, why string) error {
	return WriteMsg(s, &pb.SessionReply{Refused: why})
}

// SessionRefusedError is a provider's refusal of a session.
type SessionRefusedError struct{ Reason string }

func (e *SessionRefusedError) Error() string { return "session refused: " + e.Reason }

// OpenSession asks provider p for the session req and returns the stream
// once accepted, with no deadline left on it.
func OpenSession(ctx context.Context, h host.Host, sw Swarm, p peer.ID, req *pb.SessionRequest) (network.Stream, error) {
	return openSession(ctx, h, sw, p, req, sessionDeadline)
}

// SessionWork sends p a session request whose reply comes once the work
// is done (an unpack, a pack), within deadline; a refusal, or the work's
// failure, is a *SessionRefusedError.
func SessionWork(ctx context.Context, h host.Host, sw Swarm, p peer.ID, req *pb.SessionRequest, deadline time.Duration) error {
	s, err := openSession(ctx, h, sw, p, req, deadline)
	if err != nil {
		return err
	}
	// The reply is the work's outcome, and it has been read. Close's
	// error says nothing more: on QUIC the provider's close stops our
	// write side, and closing it then fails ("close called for canceled
	// stream") though the work was done.
	s.Close()
	return nil
}

func openSession(ctx context.Context, h host.Host, sw Swarm, p peer.ID, req *pb.SessionRequest, deadline time.Duration) (network.Stream, error) {
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	s, err := dial(dctx, h, sw, p, SessionProtocol)
	if err != nil {
		return nil, err
	}
	if err := WriteMsg(s, req); err != nil {
		s.Reset()
		return nil, err
	}
	reply := new(pb.SessionReply)
	if err := ReadMsg(s, MaxSessionRequest, reply); err != nil {
		s.Reset()
		return nil, err
	}
	if reply.Refused != "" {
		s.Reset()
		return nil, &SessionRefusedError{Reason: reply.Refused}
	}
	s.SetDeadline(time.Time{})
	return s, nil
}

// ExecWriter sends a command's output as ExecOutput frames, stdout or
// stderr, in chunks of at most ExecChunk; safe for concurrent use with
// its pair (see NewExecWriters).
type ExecWriter struct {
	mu     *sync.Mutex
	s      network.Stream
	stderr bool
}

// NewExecWriters returns the stdout and stderr writers of s, which share
// one lock so that frames never interleave.
func NewExecWriters(s network.Stream) (stdout, stderr *ExecWriter) {
	mu := new(sync.Mutex)
	return &ExecWriter{mu: mu, s: s}, &ExecWriter{mu: mu, s: s, stderr: true}
}

func (w *ExecWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), ExecChunk)]
		f := &pb.ExecOutput{Kind: &pb.ExecOutput_Stdout{Stdout: chunk}}
		if w.stderr {
			f.Kind = &pb.ExecOutput_Stderr{Stderr: chunk}
		}
		if err := WriteMsg(w.s, f); err != nil {
			return n, err
		}
		n, b = n+len(chunk), b[len(chunk):]
	}
	return n, nil
}

// End sends the last frame: the exit code, or why the command failed.
func (w *ExecWriter) End(code int, err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := &pb.ExecOutput{Kind: &pb.ExecOutput_ExitCode{ExitCode: int32(code)}}
	if err != nil {
		f.Kind = &pb.ExecOutput_Error{Error: err.Error()}
	}
	return WriteMsg(w.s, f)
}

// ReadExecInput reads the renter's frames until the stream ends: input
// into stdin (closed at its end; nil: input is refused), sizes into
// resize (the latest kept).
func ReadExecInput(s network.Stream, stdin *io.PipeWriter, resize chan [2]uint) error {
	defer func() {
		if stdin != nil {
			stdin.Close()
		}
	}()
	for {
		f := new(pb.ExecInput)
		if err := ReadMsg(s, MaxSessionFrame, f); err != nil {
			return err
		}
		switch k := f.Kind.(type) {
		case *pb.ExecInput_Stdin:
			if stdin == nil {
				return fmt.Errorf("input sent to a command that takes none")
			}
			if _, err := stdin.Write(k.Stdin); err != nil {
				return err
			}
		case *pb.ExecInput_StdinClosed:
			if stdin != nil {
				stdin.Close()
				stdin = nil
			}
		case *pb.ExecInput_Resize:
			if resize != nil && k.Resize != nil {
				select {
				case <-resize:
				default:
				}
				resize <- [2]uint{uint(k.Resize.Rows), uint(k.Resize.Cols)}
			}
		}
	}
}

// Splice copies between a stream and a connection both ways until both
// directions have ended, passing each end on as a half-close, or until
// ctx ends; a direction that fails closes both. It returns the bytes
// copied each way.
func Splice(ctx context.Context, s network.Stream, c io.ReadWriteCloser) (fromStream, toStream int64) {
	var once sync.Once
	kill := func() {
		once.Do(func() {
			s.Reset()
			c.Close()
		})
	}
	stop := context.AfterFunc(ctx, kill)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		if fromStream, err = io.Copy(c, s); err != nil {
			kill()
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		if toStream, err = io.Copy(s, c); err != nil {
			kill()
			return
		}
		s.CloseWrite()
	}()
	wg.Wait()
	s.Close()
	c.Close()
	return fromStream, toStream
}

// ExecInput sends a renter's input and terminal sizes as ExecInput
// frames; safe for concurrent use.
type ExecInput struct {
	mu sync.Mutex
	s  network.Stream
}

// NewExecInput returns the input side of exec session s.
func NewExecInput(s network.Stream) *ExecInput { return &ExecInput{s: s} }

func (in *ExecInput) send(f *pb.ExecInput) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return WriteMsg(in.s, f)
}

// Copy sends r as the command's input until r ends, then says so.
func (in *ExecInput) Copy(r io.Reader) error {
	buf := make([]byte, ExecChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := in.send(&pb.ExecInput{Kind: &pb.ExecInput_Stdin{Stdin: buf[:n]}}); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return in.send(&pb.ExecInput{Kind: &pb.ExecInput_StdinClosed{StdinClosed: true}})
		}
		if err != nil {
			return err
		}
	}
}

// Resize sends the terminal's new size.
func (in *ExecInput) Resize(rows, cols uint) error {
	return in.send(&pb.ExecInput{Kind: &pb.ExecInput_Resize{Resize: &pb.WindowSize{Rows: uint32(rows), Cols: uint32(cols)}}})
}

// ReadExecOutput writes a session's output frames to stdout and stderr
// until the last, and returns the command's exit code, or the provider's
// error.
func ReadExecOutput(s network.Stream, stdout, stderr io.Writer) (int, error) {
	for {
		f := new(pb.ExecOutput)
		if err := ReadMsg(s, MaxSessionFrame, f); err != nil {
			return -1, err
		}
		var err error
		switch k := f.Kind.(type) {
		case *pb.ExecOutput_Stdout:
			_, err = stdout.Write(k.Stdout)
		case *pb.ExecOutput_Stderr:
			_, err = stderr.Write(k.Stderr)
		case *pb.ExecOutput_ExitCode:
			return int(k.ExitCode), nil
		case *pb.ExecOutput_Error:
			return -1, errors.New(k.Error)
		}
		if err != nil {
			return -1, err
		}
	}
}
