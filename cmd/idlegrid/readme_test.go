package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// The README's blocks run as a reader pastes them: in order, into one
// shell at the repository root (its set-up says "from the repository
// root", and `go run ./cmd/idlegrid` needs it), with a fresh HOME, so
// that what one block exports or cds into holds for the next. A comment
// on the line before a fence changes how its block runs:
//
//	<!-- readme: skip: REASON -->  not run here; the test logs REASON
//	<!-- readme: devstack -->      run in its own shell until it prints
//	                               its commands (status, offers, quote,
//	                               rent, ui), which then run as printed
//	                               in the reader's shell; then Ctrl-C
//	                               (SIGINT) stops it
//
// A block that starts a daemon does it as a reader would, with `&`, and
// waits for it with `idlegrid wait`; whatever the blocks leave running
// is stopped at the end.
const (
	readmeMarker = "<!-- readme: "
	// readmeBlockLimit bounds each block; a rental's worst case (a
	// provider's first attestation, a container started) fits well.
	readmeBlockLimit = 2 * time.Minute
	// readmeDevstackLimit bounds devstack's start, to its first view: five
	// nodes and a chain, beside the rest of the suite (an image build on
	// the same engine among it) on two cores.
	readmeDevstackLimit = 5 * time.Minute
)

// readmeBlock is one fenced sh block of the README.
type readmeBlock struct {
	heading string // the section, and the bold lead of its paragraph
	line    int    // the fence's line, from 1
	marker  string // "", "skip: REASON" or "devstack"
	text    string
}

// name is how a failure names the block: heading, line and first command.
func (b readmeBlock) name() string {
	first, _, _ := strings.Cut(b.text, "\n")
	return fmt.Sprintf("%s (README.md:%d): %s", b.heading, b.line, first)
}

var readmeLead = regexp.MustCompile(`^\*\*([^*]+)\*\*`)

// readmeBlocks extracts every ```sh block of a README, in order.
func readmeBlocks(text string) ([]readmeBlock, error) {
	var (
		blocks        []readmeBlock
		section, lead string
		prev          string
		cur           *readmeBlock
		body          strings.Builder
	)
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur != nil && strings.HasPrefix(line, "```"):
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		case line == "```sh":
			cur = &readmeBlock{heading: section, line: i + 1}
			if lead != "" {
				cur.heading += " / " + lead
			}
			body.Reset()
			if m, ok := strings.CutPrefix(prev, readmeMarker); ok {
				m, ok = strings.CutSuffix(m, " -->")
				if !ok || (m != "devstack" && !strings.HasPrefix(m, "skip: ")) {
					return nil, fmt.Errorf("README.md:%d: marker %q: want skip: REASON or devstack", i, prev)
				}
				cur.marker = m
			}
		case strings.HasPrefix(line, "#"):
			section, lead = strings.TrimSpace(strings.TrimLeft(line, "#")), ""
		default:
			if m := readmeLead.FindStringSubmatch(line); m != nil {
				lead = strings.TrimSuffix(m[1], ".")
			}
		}
		prev = line
	}
	if cur != nil {
		return nil, fmt.Errorf("README.md:%d: block not closed", cur.line)
	}
	return blocks, nil
}

func TestDevstackCommandsAreTheLastViewsLines(t *testing.T) {
	out := "devstack: 2 nodes\n\nidlegrid devstack — 2 nodes (Ctrl-C stops)\nAsk any node: idlegrid status --repo /old\n" +
		"\nidlegrid devstack — 2 nodes (Ctrl-C stops)\n\n0 of 2 nodes see every other node.\n" +
		"Ask any node: idlegrid status --repo /d/0\n" +
		"Shop:        idlegrid offers --repo /d/0   idlegrid quote --repo /d/0 --gpu A100\n" +
		"Rent:        idlegrid rent --repo /d/r -- sh -c 'echo \"a  b\"'\n" +
		"Look:        idlegrid ui --repo /d/0   (the dashboard in a browser)\n"
	got := devstackCommands(out)
	want := []string{"idlegrid status --repo /d/0", "idlegrid offers --repo /d/0", "idlegrid quote --repo /d/0 --gpu A100",
		`idlegrid rent --repo /d/r -- sh -c 'echo "a  b"'`, "idlegrid ui --repo /d/0"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestReadmeBlocksFindTheirHeadingsAndMarkers(t *testing.T) {
	got, err := readmeBlocks("# A\n\n**Lead.** text\n\n```sh\necho a\n```\n\n## B\n<!-- readme: skip: why -->\n```sh\nx\ny\n```\n```go\nno\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []readmeBlock{
		{heading: "A / Lead", line: 5, text: "echo a\n"},
		{heading: "B", line: 11, marker: "skip: why", text: "x\ny\n"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := readmeBlocks("<!-- readme: bogus -->\n```sh\nx\n```\n"); err == nil {
		t.Fatal("an unknown marker was taken")
	}
}

// TestEveryReadmeBlockRunsAsPasted runs README.md's sh blocks in order
// in one shell, as a reader on a fresh machine pastes them.
func TestEveryReadmeBlockRunsAsPasted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's nodes and rentals (-short)")
	}
	// Beside the other tests: the README's ports (4001–4003, 5080–5083,
	// …) are below those the others take (port 0, fixedPort's).
	t.Parallel()
	docker := executortest.Docker(t) // the provider's jobs are containers
	bin := buildBinary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(text))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// Registered first, so it runs after the shell's daemons are stopped.
	t.Cleanup(func() { removeLeftContainers(t, docker, bin, filepath.Join(home, ".idlegrid")) })
	sh := startReaderShell(t, root, readmeEnv(t, bin, home))
	for _, b := range blocks {
		start := time.Now()
		switch {
		case strings.HasPrefix(b.marker, "skip: "):
			t.Logf("skip %s: %s", b.name(), strings.TrimPrefix(b.marker, "skip: "))
			continue
		case b.marker == "devstack":
			runDevstackBlock(t, sh, b)
		default:
			sh.run(t, b.name(), b.text)
		}
		t.Logf("ran %s in %s", b.name(), time.Since(start).Round(100*time.Millisecond))
	}
}

// readmeEnv is a fresh machine's environment: a new HOME (so ~/.idlegrid
// is new, and GOPATH with it), the built binary first on PATH, and Go's
// caches kept so that the blocks' go commands do not build from nothing.
func readmeEnv(t *testing.T, bin, home string) []string {
	env := []string{
		"HOME=" + home,
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"TMPDIR=" + t.TempDir(),
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPROXY", "GOSUMDB", "GOFLAGS", "GOTOOLCHAIN"} {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", k, err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	for _, k := range []string{"CGO_CFLAGS", "DOCKER_HOST", "LANG", "TERM"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// readerShell is one bash that every block is pasted into, so that what
// a block exports or cds into holds for the next, as in a terminal.
type readerShell struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan string // a line per block that finished without error
	out   *os.File    // the shell's stdout and stderr, daemons' included
	exit  chan error
	env   []string
	dir   string
	n     int
}

func startReaderShell(t *testing.T, dir string, env []string) *readerShell {
	out, err := os.Create(filepath.Join(t.TempDir(), "shell.out"))
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// -e: a block stops at its first failing command, and the shell
	// with it, since later blocks rely on earlier ones.
	cmd := exec.Command("bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-s")
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w} // fd 3: the runner's line per finished block
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sh := &readerShell{cmd: cmd, stdin: stdin, done: make(chan string, 64), out: out, exit: make(chan error, 1), env: env, dir: dir}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			sh.done <- s.Text()
		}
	}()
	go func() { sh.exit <- cmd.Wait() }()
	t.Cleanup(func() {
		if keep := os.Getenv("IDLEGRID_README_LOG"); keep != "" { // everything the blocks and their daemons printed
			if b, err := os.ReadFile(out.Name()); err == nil {
				_ = os.WriteFile(keep, b, 0o644)
			}
		}
		stdin.Close()
		stopGroup(cmd.Process.Pid, syscall.SIGTERM) // the daemons the blocks left running
		out.Close()
		r.Close()
	})
	return sh
}

// run pastes one block and waits for it; a failure names the block and
// shows what it printed (the output of daemons it runs included).
func (sh *readerShell) run(t *testing.T, name, text string) {
	t.Helper()
	sh.n++
	from, _ := sh.out.Seek(0, io.SeekEnd)
	// Braces keep the block in this shell; /dev/null keeps its commands
	// from reading the blocks that follow.
	if _, err := fmt.Fprintf(sh.stdin, "{\n%s\n} </dev/null\necho %d >&3\n", text, sh.n); err != nil {
		t.Fatalf("%s: the shell is gone: %v", name, err)
	}
	output := func() string {
		b, _ := os.ReadFile(sh.out.Name())
		if int(from) <= len(b) {
			b = b[from:]
		}
		return string(b)
	}
	select {
	case <-sh.done:
	case err := <-sh.exit:
		sh.exit <- err
		t.Fatalf("block %s failed (%v); its output:\n%s", name, err, output())
	case <-time.After(readmeBlockLimit):
		t.Fatalf("block %s did not finish within %s; its output:\n%s", name, readmeBlockLimit, output())
	}
}

// runDevstackBlock runs the devstack in a shell of its own, as in a first
// terminal, runs the commands it prints in the reader's shell, as in a
// second, then stops it with Ctrl-C.
func runDevstackBlock(t *testing.T, sh *readerShell, b readmeBlock) {
	t.Helper()
	var out executortest.Buffer
	cmd := exec.Command("bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", b.text)
	cmd.Dir, cmd.Env = sh.dir, sh.env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exit := make(chan error, 1)
	go func() { exit <- cmd.Wait() }()
	defer stopGroup(cmd.Process.Pid, syscall.SIGKILL)
	// The line devstack's view ends with: "Rent:        idlegrid rent …".
	printed := regexp.MustCompile(`(?m)^Rent: +(.+)$`)
	deadline := time.Now().Add(readmeDevstackLimit)
	for {
		if loc := printed.FindStringIndex(out.String()); loc != nil {
			for _, c := range devstackCommands(out.String()[:loc[1]]) {
				sh.run(t, "a command that "+b.name()+" printed: "+c, c)
			}
			break
		}
		select {
		case err := <-exit:
			t.Fatalf("block %s exited (%v) before it printed its rent command; its output:\n%s", b.name(), err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("block %s printed no rent command within %s; its output:\n%s", b.name(), readmeDevstackLimit, out.String())
		}
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exit:
		exit <- err
		if err != nil {
			t.Fatalf("block %s: Ctrl-C: %v; its output:\n%s", b.name(), err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("block %s did not stop within 30 s of Ctrl-C; its output:\n%s", b.name(), out.String())
	}
}

// removeLeftContainers removes the job containers of the leases the
// README's provider (repository dir) sold, which a run that failed
// mid-lease leaves behind once its daemon is stopped.
func removeLeftContainers(t *testing.T, docker *client.Client, bin, dir string) {
	out, err := exec.Command(bin, "leases", "--json", "--repo", dir).Output()
	if err != nil {
		return // no provider repository: the run ended before it
	}
	var leases []api.LeaseView
	if err := json.Unmarshal(out, &leases); err != nil {
		t.Logf("the provider's leases: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range leases {
		label := filters.Arg("label", executor.DefaultLabelPrefix+".lease="+l.ID)
		list, err := docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(label)})
		if err != nil {
			t.Logf("containers of %s: %v", l.ID, err)
			continue
		}
		for _, c := range list {
			if err := docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Logf("remove the container of %s: %v", l.ID, err)
			}
		}
	}
}

// devstackLine is a line of devstack's view that shows commands to run:
// "Shop:        idlegrid offers --repo D   idlegrid quote --repo D …".
var devstackLine = regexp.MustCompile(`(?m)^(?:Ask any node|Shop|Rent|Look): +(.+)$`)

// devstackCommands are the commands in the last view of a devstack's
// output, in the order shown; several on a line stand three spaces
// apart, and a part in parentheses is a note.
func devstackCommands(out string) []string {
	if i := strings.LastIndex(out, "\nidlegrid devstack — "); i >= 0 {
		out = out[i:]
	}
	var cmds []string
	for _, m := range devstackLine.FindAllStringSubmatch(out, -1) {
		for _, part := range regexp.MustCompile(` {3,}`).Split(m[1], -1) {
			if part = strings.TrimSpace(part); part != "" && !strings.HasPrefix(part, "(") {
				cmds = append(cmds, part)
			}
		}
	}
	return cmds
}

// stopGroup signals a process group, the leader and whatever it left
// running in the background, and kills what is left after 15 seconds.
func stopGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pid, 0) == syscall.ESRCH {
			return
		}
		time.Sleep(100 * time.Millisecond) // a group's end sends no event to wait on
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
