package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/repo"
)

func TestATypoIsAnsweredWithWhatItMeant(t *testing.T) {
	dir := newRepo(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rnet"}, exitUsage, `unknown command "rnet" for "idlegrid"; did you mean "rent"?`},
		{[]string{"config", "st"}, exitUsage, `did you mean "set"?`},
		{[]string{"rent", "--max-prce", "1"}, exitUsage, "unknown flag: --max-prce; did you mean --max-price?"},
		{[]string{"quote", "--cuont", "2"}, exitUsage, "did you mean --count?"},
		{[]string{"config", "set", "--repo", dir, "provider.prce", "1"}, exitFailure, `unknown key "provider.prce"; did you mean "provider.price"?`},
		{[]string{"config", "get", "--repo", dir, "provider.prce"}, exitFailure, `unknown key "provider.prce"; did you mean "provider.price"?`},
		{[]string{"version", "foo"}, exitUsage, `idlegrid version takes no arguments (got "foo")`},
	} {
		r := runCLI(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.lastLine(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, r.code, r.lastLine(), tc.code, tc.want)
		}
	}

	// A key misspelt in the file itself.
	cfg := filepath.Join(dir, repo.ConfigFile)
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(data), "max_peers =", "max_peer =", 1)), 0o644)
	r := runCLI(t, "config", "show", "--repo", dir)
	if want := `did you mean "dht.max_peers"?`; r.code != exitFailure || !strings.Contains(r.lastLine(), want) {
		t.Errorf("a config file with a misspelt key: exit %d, %q; want %q", r.code, r.lastLine(), want)
	}
}

func TestAFlagsBadValueNamesTheFlagTheValueAndWhatItTakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rent", "--image", "x", "--max-price", "-1"}, "--max-price -1: want a price of 0 or more USD per GPU-hour"},
		{[]string{"quote", "--max-price", "cheap"}, "--max-price cheap: want a price of 0 or more"},
		{[]string{"rent", "--image", "x", "--count", "two"}, "--count two: want a whole number"},
		{[]string{"rent", "--image", "x", "--gather", "5"}, "--gather 5: want a duration such as 30s"},
		{[]string{"rent", "--image", "x", "--dataset", "bafybeigdyrzt"}, `--dataset "bafybeigdyrzt": want CID:/PATH, such as bafybei…:/data`},
		{[]string{"rent", "--image", "x", "--dataset", "bafybeigdyrzt:/workspace/d"}, `is in /workspace; mount a dataset elsewhere, such as /data`},
	} {
		r := runCLI(t, append(tc.args, "--repo", filepath.Join(t.TempDir(), "none"))...)
		if r.code != exitUsage || !strings.Contains(r.lastLine(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, r.code, r.lastLine(), exitUsage, tc.want)
		}
	}
}

func TestANegativeNumberIsAValueTheKeyChecks(t *testing.T) {
	dir := newRepo(t, "--profile", "provider")
	before := snapshot(t, dir)
	for _, args := range [][]string{
		{"config", "set", "--repo", dir, "provider.price", "-1"},
		{"config", "set", "provider.price", "-1", "--repo", dir},
		{"config", "set", "provider.price", "-1.5", "--repo", dir},
	} {
		r := runCLI(t, args...)
		value := args[slices.Index(args, "provider.price")+1]
		if l := r.lastLine(); r.code != exitFailure || !strings.Contains(l, "provider.price") || !strings.Contains(l, value) || !strings.Contains(l, "want") {
			t.Errorf("%v: exit %d, %q; want %d naming the key, the value and what it takes", args, r.code, l, exitFailure)
		}
	}
	if snapshot(t, dir) != before {
		t.Error("a refused negative value changed the repository")
	}
	if r := runCLI(t, "config", "set", "--repo", dir, "network.conn_low", "-5"); r.code != exitFailure || !strings.Contains(r.lastLine(), "network.conn_low = -5") {
		t.Errorf("a negative integer setting: exit %d, %q", r.code, r.lastLine())
	}
}

func TestRentWithNoPeerToAskFailsAtOnceSayingHowToGiveItOne(t *testing.T) {
	for name, dir := range map[string]string{"a repository": newRepo(t), "no repository": filepath.Join(t.TempDir(), "none")} {
		start := time.Now()
		r := runCLI(t, "rent", "--repo", dir, "--image", "busybox", "--json", "--", "true")
		l := r.lastLine()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: rent with no peers took %s, want it to fail at once", name, took)
		}
		if r.code != exitFailure || !strings.Contains(l, "no peers to ask") || !strings.Contains(l, "--bootstrap") || !strings.Contains(r.stdout, `"code": "no_peers"`) {
			t.Errorf("%s: exit %d, %q, stdout %s; want %d, no peers to ask, and how to name one", name, r.code, l, r.stdout, exitFailure)
		}
		if name == "a repository" && !strings.Contains(l, "network.bootstrap in "+filepath.Join(dir, repo.ConfigFile)) {
			t.Errorf("%s: %q does not name the repository's network.bootstrap", name, l)
		}
	}
}

func TestABootstrapFlagNobodyAnswersIsNamedNotAThrowAwayFile(t *testing.T) {
	r := runCLI(t, "rent", "--repo", filepath.Join(t.TempDir(), "none"), "--image", "busybox",
		"--bootstrap", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp", "--", "true")
	l := r.lastLine()
	if r.code != exitFailure || !strings.Contains(l, "no bootstrap peer reachable") || !strings.Contains(l, "check the --bootstrap addresses") || strings.Contains(l, "config.toml") {
		t.Errorf("rent with a dead --bootstrap and no repository: exit %d, %q; want the flag named, not a file that is gone", r.code, l)
	}
}

func TestALeaseCommandsMistakeSpeaksOfThatCommand(t *testing.T) {
	dir := newRepo(t)
	for _, verb := range []string{"extend", "exec", "port-forward", "cp"} {
		args := map[string][]string{
			"extend":       {"extend", "lease-0", "--hours", "1"},
			"exec":         {"exec", "lease-0", "--", "true"},
			"port-forward": {"port-forward", "lease-0", "8888"},
			"cp":           {"cp", "lease-0:/workspace/x", filepath.Join(t.TempDir(), "x")},
		}[verb]
		r := runCLI(t, append([]string{args[0], "--repo", dir}, args[1:]...)...)
		errLine := strings.Split(strings.TrimSpace(r.stderr), "\n")[0]
		if r.code != exitFailure || !strings.HasPrefix(errLine, "idlegrid: "+verb+": no rental lease-0 made from "+dir) || !strings.Contains(errLine, verb+" reaches only the leases") {
			t.Errorf("%s of a lease this repository never rented: exit %d, %q", verb, r.code, errLine)
		}
		for _, other := range []string{"extend", "exec", "port-forward", "cp"} {
			if other != verb && strings.Contains(errLine, other) {
				t.Errorf("%s of a lease this repository never rented speaks of %s: %q", verb, other, errLine)
			}
		}
	}
	r := runCLI(t, "extend", "../../etc", "--hours", "1", "--repo", dir)
	if want := `extend: lease ID "../../etc": want 1-64 of`; r.code != exitFailure || !strings.Contains(r.lastLine(), want) {
		t.Errorf("extend of a lease ID no lease has: exit %d, %q; want %q", r.code, r.lastLine(), want)
	}
}

func TestAPricingFloorAboveItsCeilingIsRefusedWhateverThePolicy(t *testing.T) {
	dir := newRepo(t, "--profile", "provider")
	setConfig(t, dir, "provider.pricing.ceiling", "4.00")
	r := runCLI(t, "config", "set", "--repo", dir, "provider.pricing.floor", "5")
	want := `provider.pricing.ceiling = "4.00": want at least provider.pricing.floor = "5"`
	if r.code != exitFailure || !strings.Contains(r.lastLine(), want) {
		t.Errorf("a floor above the ceiling with fixed prices: exit %d, %q; want %q", r.code, r.lastLine(), want)
	}
}

func TestConfigSetHasTheRunningDaemonReloadAndSaysWhatApplied(t *testing.T) {
	dir := newRepo(t, "--profile", "provider")
	setConfig(t, dir, "provider.gpu_source", "fake:dgxh100")
	setConfig(t, dir, "provider.enabled", "true")
	errb, stop := runDaemonUntil(t, []string{"daemon", "--repo", dir}, "idlegrid daemon ready")
	defer stop()
	for _, tc := range []struct{ key, value, want string }{
		{"provider.price", "0.99", "the running daemon applied provider.price"},
		{"log.level", "debug", "the running daemon takes log.level at its next start: restart it to apply the change"},
		{"log.subsystems.dht", "debug", "the running daemon takes log.subsystems.dht at its next start: restart it to apply the change"},
		{"provider.price", "0.99", "the running daemon already runs with this provider.price"},
	} {
		r := runCLI(t, "config", "set", "--repo", dir, tc.key, tc.value)
		if r.code != 0 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "restart it") != strings.Contains(tc.want, "restart it") {
			t.Errorf("config set %s %s beside a daemon: exit %d, %q; want %q", tc.key, tc.value, r.code, r.stderr, tc.want)
		}
	}
	if !strings.Contains(errb.String(), "configuration reloaded") || !strings.Contains(errb.String(), "applied=provider.price") {
		t.Errorf("the daemon never applied provider.price:\n%s", errb)
	}
}

func TestNegativesAsArgsMovesOnlyArguments(t *testing.T) {
	root := newRoot(&env{})
	for _, tc := range []struct{ in, want string }{
		{"config set provider.price -1", "config set provider.price -- -1"},
		{"config set provider.price -1 --repo d", "config set provider.price --repo d -- -1"},
		{"config set --repo=d network.conn_low -5", "config set --repo=d network.conn_low -- -5"},
		{"rent --max-price -1 --image x", "rent --max-price -1 --image x"},           // a flag's value
		{"rent -d --max-price -1.5 --image x", "rent -d --max-price -1.5 --image x"}, // after a bool shorthand
		{"extend lease-0 --hours -1", "extend lease-0 --hours -1"},
		{"exec lease-0 -- echo -1", "exec lease-0 -- echo -1"}, // a line with its own --
		{"config set provider.price 1", "config set provider.price 1"},
	} {
		if got := strings.Join(negativesAsArgs(root, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.in, got, tc.want)
		}
	}
}
