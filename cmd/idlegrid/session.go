package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// dialLease opens a link to the provider of one of the repository's
// rentals, for the command verb; its errors name verb.
func (e *env) dialLease(verb, leaseID string) (*renter.LeaseLink, error) {
	r, err := repo.Open(e.repoPath())
	if err != nil {
		return nil, err
	}
	link, err := renter.DialLease(e.ctx, r, leaseID)
	switch {
	case errors.Is(err, fault.ErrNotFound):
		return nil, fmt.Errorf("%s: %w; %s reaches only the leases 'idlegrid rent' made from this repository", verb, err, verb)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	return link, nil
}

func newExecCmd(e *env) *cobra.Command {
	var interactive, tty bool
	c := &cobra.Command{
		Use:   "exec LEASE [-i] [-t] -- CMD [ARGS...]",
		Short: "Run a command in a running lease's container, beside its job",
		Long: `Run a command in the container of one of your running leases, beside its
job: the same image, user, limits and /workspace, and still no network. Only
the lease's renter may, and only while its job runs; the command dies with
the lease.

-i sends this terminal's input to the command; -t gives it a terminal (raw
mode here, resized with this window). exec works while 'idlegrid rent'
follows the lease in another terminal: it needs only the repository the
rent used. It exits with the command's exit code.`,
		Example: `  idlegrid exec lease-4f2a… -- nvidia-smi
  idlegrid exec lease-4f2a… -it -- sh`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usagef("exec LEASE -- CMD: name the lease, then -- and the command")
			}
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			link, err := e.dialLease("exec", args[0])
			if err != nil {
				return err
			}
			defer link.Close()
			req := &pb.ExecRequest{Argv: args[1:], Tty: tty}
			eio := renter.ExecIO{Stdout: e.stdout, Stderr: e.stderr}
			if interactive {
				eio.Stdin = os.Stdin
			}
			if tty {
				fd := int(os.Stdin.Fd())
				if !term.IsTerminal(fd) {
					return usagef("-t: standard input is not a terminal")
				}
				if w, h, err := term.GetSize(fd); err == nil {
					req.Rows, req.Cols = uint32(h), uint32(w)
				}
				old, err := term.MakeRaw(fd)
				if err != nil {
					return err
				}
				defer term.Restore(fd, old)
				resize := make(chan [2]uint, 1)
				winch := make(chan os.Signal, 1)
				signal.Notify(winch, syscall.SIGWINCH)
				defer signal.Stop(winch)
				go func() {
					for range winch {
						if w, h, err := term.GetSize(fd); err == nil {
							select {
							case resize <- [2]uint{uint(h), uint(w)}:
							default:
							}
						}
					}
				}()
				eio.Resize = resize
			}
			code, err := link.Exec(e.ctx, req, eio)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{min(max(code, 1), 255), "command_failed", fmt.Errorf("lease %s: the command exited with code %d", args[0], code)}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&interactive, "stdin", "i", false, "send this terminal's input to the command")
	c.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	return c
}

func newPortForwardCmd(e *env) *cobra.Command {
	var address string
	c := &cobra.Command{
		Use:   "port-forward LEASE LOCAL[:REMOTE]",
		Short: "Reach a TCP port inside a running lease's container from this machine",
		Long: `Listen on LOCAL (on 127.0.0.1 unless --address) and carry each connection
to port REMOTE (LOCAL unless given) inside the container of one of your
running leases, over the swarm, until Ctrl-C: a Jupyter notebook, an
inference server, TensorBoard. The container keeps no network: the provider
connects to the port from inside it. Only the lease's renter may; the
tunnel ends with the lease.`,
		Example: `  idlegrid port-forward lease-4f2a… 8888
  idlegrid port-forward lease-4f2a… 8080:80 --address 0.0.0.0`,
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			local, remote, err := parsePorts(args[1])
			if err != nil {
				return usagef("%v", err)
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
			if err != nil {
				return fmt.Errorf("listen on %s:%d: %w", address, local, err)
			}
			defer ln.Close()
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			link, err := e.dialLease("port-forward", args[0])
			if err != nil {
				return err
			}
			defer link.Close()
			// The lease must be running and the port reachable before
			// this says it forwards; the watch ends with the job.
			watch, err := link.Watch(e.ctx)
			if err != nil {
				return err
			}
			defer watch.Reset()
			first, err := link.Forward(e.ctx, remote)
			if err != nil {
				return err
			}
			first.Reset()
			fmt.Fprintf(e.stderr, "idlegrid: forwarding %s to port %d of lease %s (Ctrl-C stops)\n", ln.Addr(), remote, args[0])
			stop := context.AfterFunc(e.ctx, func() { ln.Close() })
			defer stop()
			ended := make(chan struct{})
			go func() {
				io.Copy(io.Discard, io.LimitReader(watch, 1))
				close(ended)
				ln.Close()
			}()
			var wg sync.WaitGroup
			defer wg.Wait()
			for {
				c, err := ln.Accept()
				if err != nil {
					select {
					case <-ended:
						return fmt.Errorf("lease %s: its job ended, and so does the tunnel", args[0])
					default:
					}
					if e.ctx.Err() != nil {
						return nil
					}
					return err
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := link.ForwardConn(e.ctx, remote, c); err != nil {
						fmt.Fprintf(e.stderr, "idlegrid: connection from %s not forwarded: %s\n", c.RemoteAddr(), inert.Text(err.Error()))
					}
				}()
			}
		},
	}
	c.Flags().StringVar(&address, "address", "127.0.0.1", "local address to listen on")
	return c
}

// parsePorts reads LOCAL[:REMOTE].
func parsePorts(s string) (local, remote int, err error) {
	l, r, ok := strings.Cut(s, ":")
	if !ok {
		r = l
	}
	if local, err = strconv.Atoi(l); err != nil || local < 0 || local > 65535 {
		return 0, 0, fmt.Errorf("ports %q: LOCAL %q: want 0 to 65535 (0: any free port)", s, l)
	}
	if remote, err = strconv.Atoi(r); err != nil || remote < 1 || remote > 65535 {
		return 0, 0, fmt.Errorf("ports %q: REMOTE %q: want 1 to 65535", s, r)
	}
	return local, remote, nil
}
