package executor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"
)

// ErrNotRunning: the lease has no running workload to reach.
var ErrNotRunning = errors.New("the lease's job is not running")

// ExecSpec is a command to run beside a lease's job, in its container.
type ExecSpec struct {
	Argv []string
	// TTY gives the command a terminal of Rows×Cols (resized through the
	// channel Exec takes); its output then comes on Stdout alone.
	TTY        bool
	Rows, Cols uint
	// Stdin, when not nil, is the command's input until it ends.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan [2]uint // rows, cols; may be nil
	// User runs the command as another user than the job's ("uid:gid");
	// the provider's own work in the container alone.
	User string
}

// Sessions is an executor that can reach into a running job: run a
// command beside it and connect to a TCP port it listens on.
type Sessions interface {
	// Exec runs spec in the job of leaseID, as the job's user in its
	// working folder, and returns the command's exit code once its
	// output has ended.
	Exec(ctx context.Context, leaseID string, spec ExecSpec) (int, error)
	// DialPort connects to TCP port on the loopback address of the job of
	// leaseID, which may have no network of its own.
	DialPort(ctx context.Context, leaseID string, port int) (net.Conn, error)
}

var (
	_ Sessions  = (*Docker)(nil)
	_ Collector = (*Docker)(nil)
)

// running returns the ID of the running container of leaseID.
func (d *Docker) running(ctx context.Context, leaseID string) (string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", d.label("lease")+"="+leaseID), filters.Arg("status", "running")),
	})
	if err != nil {
		return "", d.engineErr("lease "+leaseID, err)
	}
	if len(list) == 0 {
		return "", fmt.Errorf("lease %s: %w", leaseID, ErrNotRunning)
	}
	return list[0].ID, nil
}

// Exec runs spec through the engine's exec: it runs as the container's
// user, with its limits, and dies with the container at the lease's end.
func (d *Docker) Exec(ctx context.Context, leaseID string, spec ExecSpec) (int, error) {
	if len(spec.Argv) == 0 {
		return -1, errors.New("exec: empty command")
	}
	id, err := d.running(ctx, leaseID)
	if err != nil {
		return -1, err
	}
	created, err := d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		Tty: spec.TTY, AttachStdin: spec.Stdin != nil, AttachStdout: true, AttachStderr: true,
		WorkingDir: "/workspace", Cmd: spec.Argv, User: spec.User,
	})
	if err != nil {
		return -1, d.engineErr("exec in lease "+leaseID, err)
	}
	att, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: spec.TTY})
	if err != nil {
		return -1, d.engineErr("exec in lease "+leaseID, err)
	}
	defer att.Close()
	resize := func(rows, cols uint) {
		if spec.TTY && rows > 0 && cols > 0 {
			_ = d.cli.ContainerExecResize(ctx, created.ID, container.ResizeOptions{Height: rows, Width: cols})
		}
	}
	resize(spec.Rows, spec.Cols)
	if spec.Stdin != nil {
		go func() {
			io.Copy(att.Conn, spec.Stdin)
			// A terminal's end of input is a byte (^D), not a close: the
			// engine ends a TTY exec's output with its input.
			if !spec.TTY {
				att.CloseWrite()
			}
		}()
	}
	done := make(chan struct{})
	defer close(done)
	if spec.Resize != nil {
		go func() {
			for {
				select {
				case rc := <-spec.Resize:
					resize(rc[0], rc[1])
				case <-done:
					return
				}
			}
		}()
	}
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	if spec.TTY {
		_, err = io.Copy(spec.Stdout, att.Reader)
	} else {
		_, err = stdcopy.StdCopy(spec.Stdout, spec.Stderr, att.Reader)
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	if err != nil {
		return -1, fmt.Errorf("exec in lease %s: output: %w", leaseID, err)
	}
	return d.execCode(ctx, leaseID, created.ID)
}

// execCode is the exit code of exec execID in lease leaseID, whose output
// ended with its command: the engine records the code a moment later.
func (d *Docker) execCode(ctx context.Context, leaseID, execID string) (int, error) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for {
		info, err := d.cli.ContainerExecInspect(ictx, execID)
		if err != nil {
			return -1, d.engineErr("exec in lease "+leaseID, err)
		}
		if !info.Running {
			return info.ExitCode, nil
		}
		select {
		case <-ictx.Done():
			return -1, fmt.Errorf("exec in lease %s: output ended and the command still runs", leaseID)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ErrNoPortPath: a port cannot be reached in this container: the daemon
// may not enter its network namespace, and the image has no relay.
var ErrNoPortPath = errors.New("no way to reach the port")

// DialPort connects to 127.0.0.1:port inside the container. The
// container keeps no network: the connection is made from inside its
// own (loopback-only) network namespace, which needs the daemon to run
// as root (CAP_SYS_ADMIN). Without that, it relays through the image's
// own nc (busybox and most base images have one) run by exec.
func (d *Docker) DialPort(ctx context.Context, leaseID string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535", port)
	}
	id, err := d.running(ctx, leaseID)
	if err != nil {
		return nil, err
	}
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, d.engineErr("lease "+leaseID, err)
	}
	if info.State == nil || info.State.Pid == 0 {
		return nil, fmt.Errorf("lease %s: %w", leaseID, ErrNotRunning)
	}
	if !d.noNetns {
		c, err := dialInNetns(ctx, info.State.Pid, port)
		if !errors.Is(err, unix.EPERM) {
			return c, err
		}
	}
	return d.relay(ctx, id, leaseID, port)
}

// dialInNetns connects to 127.0.0.1:port from inside the network
// namespace of process pid, on a thread of its own that is never given
// back to the runtime (it dies with its goroutine, namespace and all).
func dialInNetns(ctx context.Context, pid, port int) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	out := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			out <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			out <- result{err: fmt.Errorf("enter the container's network: %w", err)}
			return
		}
		var dl net.Dialer
		c, err := dl.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		out <- result{c, err}
	}()
	r := <-out
	return r.c, r.err
}

// relay reaches the port through `nc 127.0.0.1 PORT` run by exec in the
// container: the exec's stdin and stdout are the connection.
func (d *Docker) relay(ctx context.Context, id, leaseID string, port int) (net.Conn, error) {
	created, err := d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"nc", "127.0.0.1", strconv.Itoa(port)},
	})
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w: this daemon may not enter the container's network (it needs root) and exec failed: %v", leaseID, ErrNoPortPath, err)
	}
	att, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, d.engineErr("lease "+leaseID, err)
	}
	// The exec's output is multiplexed (no TTY): its stdout is the
	// connection's data; what it says on stderr is dropped.
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, att.Reader)
		pw.CloseWithError(err)
	}()
	return &relayConn{Conn: att.Conn, r: pr, closeWrite: att.CloseWrite}, nil
}

// relayConn is a hijacked exec connection whose reads come demultiplexed.
type relayConn struct {
	net.Conn
	r          io.Reader
	closeWrite func() error
}

func (c *relayConn) Read(b []byte) (int, error) { return c.r.Read(b) }
func (c *relayConn) CloseWrite() error          { return c.closeWrite() }

// UnpackTar unpacks the tar r carries at dir (made if need be) in the
// running job of leaseID, with the image's sh and tar, as the job's user.
func UnpackTar(ctx context.Context, sx Sessions, leaseID, dir string, r io.Reader) error {
	var stderr bytes.Buffer
	code, err := sx.Exec(ctx, leaseID, ExecSpec{
		Argv:  []string{"/bin/sh", "-c", `mkdir -p "$1" && tar -x -f - -C "$1"`, "idlegrid-unpack", dir},
		Stdin: r, Stdout: io.Discard, Stderr: &stderr,
	})
	return ranOK("tar -x", code, err, &stderr)
}

// PackTar packs p, a file or folder in the running job of leaseID, with
// the image's tar, as a tar whose top entry is p's base, for save to read
// to its end; a pack that fails ends save's read with the failure. It
// returns the pack's error, else save's.
func PackTar(ctx context.Context, sx Sessions, leaseID, p string, save func(tar io.Reader) error) error {
	pr, pw := io.Pipe()
	saved := make(chan error, 1)
	go func() {
		err := save(pr)
		pr.CloseWithError(err)
		saved <- err
	}()
	var stderr bytes.Buffer
	code, err := sx.Exec(ctx, leaseID, ExecSpec{
		Argv:   []string{"tar", "-c", "-f", "-", "-C", path.Dir(p), path.Base(p)},
		Stdout: pw, Stderr: &stderr,
	})
	err = ranOK("tar -c", code, err, &stderr)
	pw.CloseWithError(cmp.Or(err, io.EOF))
	return cmp.Or(err, <-saved)
}

// ranOK says why a command run in a job failed, if it did.
func ranOK(what string, code int, err error, stderr *bytes.Buffer) error {
	if err == nil && code != 0 {
		err = fmt.Errorf("%s in the container exited with code %d: %s", what, code, strings.TrimSpace(stderr.String()))
	}
	return err
}
