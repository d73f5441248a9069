package main

import (
	"bytes"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryJSONCommandFailsInJSON runs each command that has --json into
// a failure and reads its stdout: exactly one {"error", "code"} object,
// the code one the help lists, and the exit status as without --json.
func TestEveryJSONCommandFailsInJSON(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	failing := map[string][]string{
		"attach":         {"attach", "lease-x", "--repo", none},
		"attest":         {"attest", "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp", "--repo", none},
		"cancel":         {"cancel", "lease-x", "--repo", none},
		"bid":            {"bid", "--max-price", "-1"},
		"channel list":   {"channel", "list", "--repo", none},
		"channel open":   {"channel", "open", "0xnope", "--repo", none},
		"channel topup":  {"channel", "topup", "1", "--repo", none},
		"channel close":  {"channel", "close", "1", "--repo", none},
		"channel redeem": {"channel", "redeem", "--repo", none},
		"config get":     {"config", "get", "provider.prce", "--repo", none},
		"config show":    {"config", "show", "--repo", none},
		"dataset add":    {"dataset", "add", none, "--repo", none},
		"dataset ls":     {"dataset", "ls", "--repo", none},
		"dataset pin":    {"dataset", "pin", "bafy", "--repo", none},
		"dataset unpin":  {"dataset", "unpin", "bafy", "--repo", none},
		"dataset rm":     {"dataset", "rm", "bafy", "--repo", none},
		"doctor":         {"doctor", "--repo", none},
		"extend":         {"extend", "lease-x", "--hours", "1", "--repo", none},
		"gpus":           {"gpus", "--fake", "nope"},
		"id":             {"id", "--repo", none},
		"init":           {"init", "--profile", "miner", "--repo", none},
		"leases":         {"leases", "--repo", none},
		"ledger":         {"ledger", "--repo", none},
		"offers":         {"offers", "--repo", none},
		"peers":          {"peers", "--repo", none},
		"quote":          {"quote", "--max-prce", "1"},
		"receipts":       {"receipts", "--repo", none},
		"rent":           {"rent", "--image", "x", "--repo", none},
		"reputation":     {"reputation", "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp", "--repo", none},
		"status":         {"status", "--repo", none},
		"ui":             {"ui", "--open", "sometimes"},
		"version":        {"version", "extra"},
		"wait":           {"wait", "--timeout", "0s"},
		"wallet":         {"wallet", "--repo", none},
	}
	have := jsonCommands(newRoot(&env{}))
	for _, name := range have {
		if _, ok := failing[name]; !ok {
			t.Errorf("%s has --json and no failing run here", name)
		}
	}
	for name := range failing {
		if !slices.Contains(have, name) {
			t.Errorf("%s has no --json", name)
		}
	}
	codes := stableCodes()
	for name, args := range failing {
		plain := runCLI(t, args...)
		r := runCLI(t, append(args, "--json")...)
		if r.code == 0 || r.code != plain.code {
			t.Errorf("%s --json: exit %d, without --json %d; want the same failure", name, r.code, plain.code)
		}
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		var e map[string]string
		if err := dec.Decode(&e); err != nil {
			t.Errorf("%s --json: stdout is not a JSON object (%v):\n%s", name, err, r.stdout)
			continue
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Errorf("%s --json: more than one JSON value on stdout:\n%s", name, r.stdout)
		}
		if len(e) != 2 || e["error"] == "" || !slices.Contains(codes, e["code"]) {
			t.Errorf("%s --json: %v; want an error and one of the codes %v", name, e, codes)
		}
		if !strings.Contains(r.lastLine(), e["error"]) {
			t.Errorf("%s --json: error %q is not what stderr says (%q)", name, e["error"], r.lastLine())
		}
	}
}

// jsonCommands names every command under c that has a --json flag.
func jsonCommands(c *cobra.Command) []string {
	var out []string
	for _, sub := range c.Commands() {
		if sub.Flags().Lookup("json") != nil {
			out = append(out, strings.TrimPrefix(sub.CommandPath(), "idlegrid "))
		}
		out = append(out, jsonCommands(sub)...)
	}
	return out
}

func TestEveryErrorCodeIsInTheHelp(t *testing.T) {
	var out bytes.Buffer
	run(t.Context(), []string{"--help"}, func(string) string { return "" }, &out, io.Discard)
	for _, code := range stableCodes() {
		if !strings.Contains(out.String(), code) {
			t.Errorf("idlegrid --help does not list the error code %q", code)
		}
	}
}
