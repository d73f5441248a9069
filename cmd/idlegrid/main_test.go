package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
)

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// lastLine is the line a failed command ends with.
func (r result) lastLine() string {
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	return lines[len(lines)-1]
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	return runCLICtx(t, context.Background(), args...)
}

func runCLICtx(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"HOME": t.TempDir()}
	code := run(ctx, args, func(k string) string { return env[k] }, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// newRepo runs `idlegrid init` on free loopback ports and returns the path.
func newRepo(t *testing.T, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	args := append([]string{"init", "--repo", dir, "--listen-port", "0", "--api-port", "0"}, extra...)
	if r := runCLI(t, args...); r.code != 0 {
		t.Fatalf("init: %d %s", r.code, r.stderr)
	}
	setConfig(t, dir, "network.listen", `["/ip4/127.0.0.1/tcp/0"]`)
	return dir
}

func setConfig(t *testing.T, dir, key, value string) {
	t.Helper()
	if r := runCLI(t, "config", "set", "--repo", dir, key, value); r.code != 0 {
		t.Fatalf("config set %s %s: %d %s", key, value, r.code, r.stderr)
	}
}

// snapshot reads every file of the repository but the lock, so a test can
// prove a failed command changed nothing.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == repo.LockFile {
			return nil
		}
		data, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %x\n", p, data)
		return nil
	})
	return b.String()
}

func TestInitAndConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	r := runCLI(t, "init", "--repo", dir, "--profile", "renter")
	if r.code != 0 || !strings.Contains(r.stdout, "peer ID: 12D3KooW") {
		t.Fatalf("init: %+v", r)
	}
	if r := runCLI(t, "init", "--repo", dir); r.code != 1 || !strings.Contains(r.lastLine(), "--force") {
		t.Errorf("second init: %+v", r)
	}
	if r := runCLI(t, "config", "get", "--repo", dir, "dht.mode"); r.code != 0 || r.stdout != "client\n" {
		t.Errorf("config get dht.mode: %+v", r)
	}
	if r := runCLI(t, "config", "set", "--repo", dir, "log.level", "debug"); r.code != 0 {
		t.Errorf("config set: %+v", r)
	}
	if r := runCLI(t, "config", "get", "--repo", dir, "--json", "network.listen"); r.code != 0 || !strings.Contains(r.stdout, `"/ip4/0.0.0.0/tcp/0"`) {
		t.Errorf("config get --json: %+v", r)
	}
	if r := runCLI(t, "config", "show", "--repo", dir); r.code != 0 || !strings.Contains(r.stdout, "level = 'debug'") {
		t.Errorf("config show: %+v", r)
	}
	if r := runCLI(t, "id", "--repo", dir); r.code != 0 || !strings.HasPrefix(r.stdout, "12D3KooW") || !strings.Contains(r.stderr, "no daemon is running") {
		t.Errorf("id without daemon: %+v", r)
	}
	for _, cmd := range []string{"status", "peers"} {
		r := runCLI(t, cmd, "--repo", dir)
		if r.code != 1 || !strings.Contains(r.lastLine(), "no daemon is running") || !strings.Contains(r.lastLine(), "idlegrid daemon --repo") {
			t.Errorf("%s without daemon: %+v", cmd, r)
		}
	}
}

func TestSwarmKeygenWritesAKeyInitAccepts(t *testing.T) {
	r := runCLI(t, "swarm", "keygen")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	if _, err := p2p.ParseSwarmKey(strings.NewReader(r.stdout)); err != nil {
		t.Fatalf("keygen output does not parse: %v\n%s", err, r.stdout)
	}
	keyFile := filepath.Join(t.TempDir(), "swarm.key")
	os.WriteFile(keyFile, []byte(r.stdout), 0o600)
	dir := filepath.Join(t.TempDir(), "repo")
	if r := runCLI(t, "init", "--repo", dir, "--swarm", "lab", "--swarm-key", keyFile); r.code != 0 {
		t.Fatalf("init with key: %+v", r)
	}
	if r := runCLI(t, "config", "get", "--repo", dir, "swarm.key_file"); r.stdout != "swarm.key\n" {
		t.Errorf("key_file = %q", r.stdout)
	}
}

func TestBadInputGetsOneClearLineAndChangesNothing(t *testing.T) {
	badKey := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(badKey, []byte("/key/swarm/psk/1.0.0/\n/base16/\nxyz\n"), 0o600)

	// Command-line mistakes: exit 2.
	usage := [][]string{
		{"init", "--profile", "miner"},
		{"init", "--bogus"},
		{"init", "--swarm", "Not A Name"},
		{"init", "--bootstrap", "/ip4/1.2.3.4/tcp/1"},
		{"daemon", "--init", "miner"},
		{"daemon", "--bootstrap", "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"},
		{"daemon", "--init", "provider", "--bootstrap", "/ip4/1.2.3.4/tcp/1"},
		{"config", "set", "only-a-key"},
		{"devstack", "--nodes", "0"},
		{"nosuchcommand"},
		{"config", "bogus"},
		{"status", "--log-format", "xml"},
		{"status", "--log-level", "loud"},
		{"swarm", "bogus"},
	}
	for _, args := range usage {
		dir := filepath.Join(t.TempDir(), "repo")
		r := runCLI(t, append(args, "--repo", dir)...)
		if r.code != 2 || !strings.HasPrefix(r.lastLine(), "idlegrid: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, r.code, r.stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%v created %s", args, dir)
		}
	}

	// A bad swarm key: exit 1, nothing created.
	dir := filepath.Join(t.TempDir(), "repo")
	r := runCLI(t, "init", "--repo", dir, "--swarm", "lab", "--swarm-key", badKey)
	if r.code != 1 || !strings.Contains(r.lastLine(), "invalid swarm key") || !strings.Contains(r.lastLine(), "3 characters, want 64 hex digits") {
		t.Errorf("bad swarm key: %+v", r)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("init with a bad key created the repository")
	}

	// Bad config values through `config set`: exit 1, config unchanged.
	dir = newRepo(t)
	before := snapshot(t, dir)
	for _, kv := range [][2]string{
		{"network.conn_low", "0"},
		{"network.conn_low", "many"},
		{"network.nope", "1"},
		{"network.bootstrap", `["/ip4/1.2.3.4/tcp/1"]`},
		{"swarm.allow_list", `["nobody"]`},
	} {
		r := runCLI(t, "config", "set", "--repo", dir, kv[0], kv[1])
		if r.code != 1 || !strings.Contains(r.lastLine(), strings.Split(kv[0], ".")[0]) {
			t.Errorf("config set %s %s: %+v", kv[0], kv[1], r)
		}
	}
	if snapshot(t, dir) != before {
		t.Error("a refused config set changed the repository")
	}

	// A config edited by hand into something wrong: the daemon refuses to
	// start, naming the problem, and changes nothing.
	cfgPath := filepath.Join(dir, repo.ConfigFile)
	good, _ := os.ReadFile(cfgPath)
	for _, tc := range []struct{ edit, want string }{
		{"\n[extra]\nkey = 1\n", `unknown key "extra`},
		{regexp.MustCompile(`conn_low = \d+`).ReplaceAllString(string(good), "conn_low = 'lots'"), "network.conn_low: want an integer"},
		{regexp.MustCompile(`max_peers = \d+`).ReplaceAllString(string(good), "max_peers = 0"), "dht.max_peers = 0: want 1 to 10000"},
	} {
		doc := tc.edit
		if strings.HasPrefix(doc, "\n") {
			doc = string(good) + doc
		}
		os.WriteFile(cfgPath, []byte(doc), 0o644)
		before := snapshot(t, dir)
		r := runCLI(t, "daemon", "--repo", dir)
		if r.code != 1 || !strings.Contains(r.lastLine(), tc.want) || !strings.Contains(r.lastLine(), cfgPath) {
			t.Errorf("daemon with bad config: exit %d, last line %q, want %q", r.code, r.lastLine(), tc.want)
		}
		if snapshot(t, dir) != before {
			t.Error("daemon with a bad config changed the repository")
		}
	}
	os.WriteFile(cfgPath, good, 0o644)
}

func TestDaemonStartFailures(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := fmt.Sprint(busy.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		key, value, want string
	}{
		{"network.listen", `["/ip4/127.0.0.1/tcp/` + port + `"]`, "cannot listen on /ip4/127.0.0.1/tcp/" + port},
		{"api.port", port, "api.port " + port},
		{"attest.cc_root_cert", `"no-such-root.pem"`, "attest.cc_root_cert: open "},
		{"attest.cc_root_cert", `"config.toml"`, "config.toml: no PEM certificate in it"},
	} {
		dir := newRepo(t)
		setConfig(t, dir, "network.dial_timeout", "2s")
		setConfig(t, dir, tc.key, tc.value)
		before := snapshot(t, dir)
		r := runCLI(t, "daemon", "--repo", dir)
		if r.code != 1 || !strings.Contains(r.lastLine(), tc.want) {
			t.Errorf("%s: exit %d, last line %q, want %q", tc.key, r.code, r.lastLine(), tc.want)
		}
		if snapshot(t, dir) != before {
			t.Errorf("%s: failed daemon changed the repository", tc.key)
		}
	}
}

// A daemon whose bootstrap peers are all down starts anyway and keeps
// dialling them (node.TestANodeStartsBeforeItsBootstrapPeer shows it joins
// once one answers); a one-shot command fails at once.
func TestDaemonStartsWithItsBootstrapPeersDown(t *testing.T) {
	dir := newRepo(t)
	setConfig(t, dir, "network.dial_timeout", "1s")
	setConfig(t, dir, "network.bootstrap", `["/ip4/127.0.0.1/tcp/1/p2p/12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"]`)
	errb, stop := runDaemonUntil(t, []string{"daemon", "--repo", dir}, "dialling the bootstrap peers again", "node started")
	if code := stop(); code != 0 {
		t.Errorf("daemon stopped with %d:\n%s", code, errb.String())
	}
	r := runCLI(t, "rent", "--repo", dir, "--gpu", "A100", "--max-price", "3", "--image", "busybox", "--", "true")
	if r.code != 1 || !strings.Contains(r.lastLine(), "no bootstrap peer reachable") {
		t.Errorf("rent with its bootstrap peer down: exit %d, last line %q", r.code, r.lastLine())
	}
}

// runDaemonUntil runs the CLI with args in this process until its stderr
// holds every one of marks, and returns that stderr and a stop that
// cancels it and returns its exit code. It fails the test when the command
// exits first or the marks take more than 30 s.
func runDaemonUntil(t *testing.T, args []string, marks ...string) (*syncBuffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, func(string) string { return "" }, &out, &errb) }()
	up := time.NewTicker(50 * time.Millisecond)
	defer up.Stop()
	deadline := time.After(30 * time.Second)
	for !containsAll(errb.String(), marks) {
		select {
		case code := <-done:
			t.Fatalf("%v exited %d before %q:\n%s", args, code, marks, errb.String())
		case <-deadline:
			t.Fatalf("%v: no %q after 30 s:\n%s", args, marks, errb.String())
		case <-up.C:
		}
	}
	return &errb, func() int { cancel(); return <-done }
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// daemon --init makes the repository a service or a container starts on,
// with its bootstrap peers, once: a second start keeps it as it is.
func TestDaemonInitCreatesTheRepositoryOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	boot := "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"
	args := []string{"daemon", "--repo", dir, "--init", "renter", "--bootstrap", boot}
	errb, stop := runDaemonUntil(t, args, "initialised a renter repository", "node started")
	if code := stop(); code != 0 {
		t.Fatalf("daemon stopped with %d:\n%s", code, errb.String())
	}
	repo, err := repo.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := repo.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Network.Bootstrap) != 1 || cfg.Network.Bootstrap[0] != boot {
		t.Errorf("the new repository's bootstrap peers are %v, want %s", cfg.Network.Bootstrap, boot)
	}
	id, err := repo.PeerID()
	if err != nil {
		t.Fatal(err)
	}
	errb, stop = runDaemonUntil(t, args, "node started", "--bootstrap is not written into it")
	if code := stop(); code != 0 {
		t.Fatalf("second start stopped with %d:\n%s", code, errb.String())
	}
	if strings.Contains(errb.String(), "initialised") {
		t.Errorf("the second start made a repository again:\n%s", errb.String())
	}
	if again, err := repo.PeerID(); err != nil || again != id {
		t.Errorf("after the second start the peer is %s (%v), was %s", again, err, id)
	}
}

func TestDaemonOnALockedRepository(t *testing.T) {
	dir := newRepo(t)
	repo, _ := repo.Open(dir)
	unlock, err := repo.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	r := runCLI(t, "daemon", "--repo", dir)
	if r.code != 1 || !strings.Contains(r.lastLine(), "held by a running daemon (pid") {
		t.Errorf("daemon on a locked repo: %+v", r)
	}
}

func TestDevstackRunsAndCleansUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := runCLICtx(t, ctx, "devstack", "--nodes", "3", "--duration", "4s")
	if r.code != 0 {
		t.Fatalf("devstack: %+v", r)
	}
	if !strings.Contains(r.stdout, "3 of 3 nodes see every other node") {
		t.Errorf("devstack never showed a full swarm:\n%s", r.stdout)
	}
	at := strings.Index(r.stdout, " nodes in ")
	if at < 0 {
		t.Fatalf("devstack did not say where its repositories are:\n%s", r.stdout)
	}
	var dir string
	fmt.Sscanf(r.stdout[at+len(" nodes in "):], "%s", &dir)
	dir = strings.TrimSuffix(dir, ",")
	if !strings.Contains(dir, "idlegrid-devstack-") {
		t.Fatalf("devstack folder %q", dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("devstack left %s behind", dir)
	}
}

func TestGPUs(t *testing.T) {
	r := runCLI(t, "gpus")
	if r.code != 0 || !(strings.HasPrefix(r.stdout, "no GPUs: ") || strings.Contains(r.stdout, " GPUs\n")) {
		t.Errorf("gpus: %+v", r)
	}
	r = runCLI(t, "gpus", "--fake", "dgxh100", "--json")
	var inv struct {
		GPUs []struct {
			UUID string `json:"uuid"`
			Name string `json:"name"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &inv); r.code != 0 || err != nil || len(inv.GPUs) != 8 || !strings.Contains(inv.GPUs[0].Name, "H100") {
		t.Errorf("gpus --fake dgxh100 --json: %+v (%v)", r, err)
	}
	if r := runCLI(t, "gpus", "--fake", "dgx1"); r.code != 2 || !strings.Contains(r.lastLine(), "dgxa100") {
		t.Errorf("gpus --fake dgx1: %+v", r)
	}
}

func TestDevstackDemoRentsAndPrintsAReceipt(t *testing.T) {
	executortest.BusyboxImage(t)
	for _, c := range []struct {
		name, dockerHost, says string
	}{
		{"containers", "", "jobs run as Docker containers of idlegrid-test/busybox:1"},
		{"plain processes without an engine", "unix:///nonexistent/docker.sock", "jobs run as PLAIN PROCESSES on this machine, in a private devstack swarm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.dockerHost != "" {
				t.Setenv("DOCKER_HOST", c.dockerHost)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			r := runCLICtx(t, ctx, "devstack", "--nodes", "2", "--demo", "--duration", "8s")
			if r.code != 0 {
				t.Fatalf("devstack --demo: %+v", r)
			}
			for _, want := range []string{c.says, " rent --repo ", "hello from GPU-", "step 3\n", "completed", "signed by renter and provider", " rent --repo ",
				"leases are paid by channel on a development chain", "demo: paid by voucher ", "demo: the provider redeemed its vouchers on 1 channel(s)"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("no %q in:\n%s", want, r.stdout)
				}
			}
			// The provider is paid what the receipt says, on chain.
			amount := regexp.MustCompile(`receipt for lease \S+: completed, \d+ s metered, ([0-9.]+) USD`).FindStringSubmatch(r.stdout)
			held := regexp.MustCompile(`now holds ([0-9.]+) USD of the test token`).FindStringSubmatch(r.stdout)
			if amount == nil || held == nil || amount[1] != held[1] || amount[1] == "0" {
				t.Errorf("the receipt says %v, the provider holds %v, in:\n%s", amount, held, r.stdout)
			}
		})
	}
}
