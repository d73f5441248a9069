package executor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// A command runs beside the job, in its container: its output apart, its
// exit code, its input, and a terminal of the size asked.
func TestExecRunsBesideTheJob(t *testing.T) {
	e := newDockerEnv(t)
	s := e.spec(t, "echo job > /workspace/mark; sleep 300")
	start(t, e.d, s)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var stdout, stderr executortest.Buffer
	code, err := e.d.Exec(ctx, s.LeaseID, executor.ExecSpec{
		Argv:   []string{"sh", "-c", "until [ -e mark ]; do sleep 0.05; done; cat mark; id -u; echo err >&2; exit 3"},
		Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil || code != 3 || stdout.String() != "job\n65534\n" || stderr.String() != "err\n" {
		t.Errorf("exec: code %d, %v, stdout %q, stderr %q; want 3, the job's file, the job's user, err apart", code, err, stdout.String(), stderr.String())
	}
	var echoed executortest.Buffer
	code, err = e.d.Exec(ctx, s.LeaseID, executor.ExecSpec{Argv: []string{"cat"}, Stdin: strings.NewReader("to stdin\n"), Stdout: &echoed, Stderr: io.Discard})
	if err != nil || code != 0 || echoed.String() != "to stdin\n" {
		t.Errorf("exec with input: code %d, %v, %q", code, err, echoed.String())
	}
	var term executortest.Buffer
	code, err = e.d.Exec(ctx, s.LeaseID, executor.ExecSpec{
		Argv: []string{"sh", "-c", "read x; stty size; [ -t 0 ] && echo tty"}, TTY: true, Rows: 33, Cols: 101,
		Stdin: strings.NewReader("go\n"), Stdout: &term,
	})
	if err != nil || code != 0 || !strings.Contains(term.String(), "33 101") || !strings.Contains(term.String(), "tty") {
		t.Errorf("exec with a terminal: code %d, %v, %q; want its size 33 101", code, err, term.String())
	}
	if _, err := e.d.Exec(ctx, "no-such-lease", executor.ExecSpec{Argv: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard}); !errors.Is(err, executor.ErrNotRunning) {
		t.Errorf("exec in a lease with no job: %v, want ErrNotRunning", err)
	}
}

// A port the job listens on inside its container, which has no network,
// is reached from outside: by entering its network namespace, and by the
// image's nc where the daemon may not.
func TestDialPortReachesTheJob(t *testing.T) {
	e := newDockerEnv(t)
	s := e.spec(t, "echo hello from the job > /workspace/index.html; exec httpd -f -p 127.0.0.1:8080 -h /workspace")
	start(t, e.d, s)
	relay, err := executor.NewDocker(executor.PortsByRelay())
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	for name, x := range map[string]*executor.Docker{"netns": e.d, "relay": relay} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			var body string
			deadline := time.Now().Add(testTimeout)
			for {
				body, err = get(ctx, x, s.LeaseID, 8080)
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond) // httpd starting: poll, under the deadline
			}
			if err != nil || body != "hello from the job\n" {
				t.Errorf("GET through DialPort: %q, %v", body, err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := e.d.DialPort(ctx, "no-such-lease", 8080); !errors.Is(err, executor.ErrNotRunning) {
		t.Errorf("a port of a lease with no job: %v, want ErrNotRunning", err)
	}
	if c, err := e.d.DialPort(ctx, s.LeaseID, 8081); err == nil {
		c.Close()
		t.Error("a port nothing listens on was reached")
	}
}

// get fetches / over a connection DialPort makes.
func get(ctx context.Context, d *executor.Docker, lease string, port int) (string, error) {
	c, err := d.DialPort(ctx, lease, port)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(c, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

var _ net.Conn // the relay's connection is a net.Conn too
