package node

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is this module's path; layers names packages relative to it.
const module = "github.com/idlegrid/idlegrid"

// layers is which way imports point (ARCHITECTURE.md), as code: for each
// package of the module, the packages of ours it may import. A rule
// "a/..." covers a and every package under it; the most specific rule
// for a package is its own. A package no rule covers fails the test, so
// a new package states its place when it is made.
var layers = map[string][]string{
	// The pure core: its wire types and nothing else of ours.
	"market/...":        {"market/..."},
	"market/pb":         nil,
	"market/gpus":       {"market/spell"},
	"market/spell":      nil, // "did you mean": commands, flags, config keys, query fields, GPU names
	"market/inert":      nil,
	"market/geo":        nil,
	"market/reputation": {"market/pb"},
	// Hardware: market's types.
	"attest/...": {"attest/...", "market/..."},
	"attest/pb":  nil,
	// libp2p: market and attest for verification, never node.
	"p2p/...": {"p2p/...", "market/...", "attest/..."},
	// node's rooms that stand alone: the clock, records, job frames,
	// transfers and the executor import no room above them.
	"node/clock":                 nil,
	"node/ui":                    nil,
	"node/fault":                 nil, // the kinds of failure: below every room
	"node/api":                   {"node/ui", "node/fault"},
	"node/api/apitest":           {"node/api", "node/fault"},
	"node/executor/...":          {"node/executor/..."},
	"node/transfer":              {"node/clock"},
	"node/data":                  {"node/clock"},
	"node/records":               {"market/...", "node/clock"},
	"node/trustchain":            {"market/..."}, // this node's chain; the lease owner and the renter reach it through interfaces of their own
	"node/jobstream":             {"market/pb", "node/clock", "node/records", "p2p"},
	"node/metricstest":           nil,
	"internal/...":               nil,
	"node/config":                {"market/...", "internal/...", "p2p", "node/executor"}, // defaults and checks of the settings of both
	"node/offer":                 {"market/...", "attest/...", "node/config"},
	"node/views":                 {"market/...", "node/api", "node/fault", "node/records", "node/config"},
	"node/repo":                  {"node/config", "node/api", "p2p", "internal/..."},
	"node/metrics":               {"market/pb", "node/records", "p2p"},
	"node/book":                  {"market/...", "attest", "p2p", "internal/...", "node/api", "node/clock"},
	"node/trust":                 {"market/...", "attest/...", "p2p", "internal/...", "node/clock", "node/metrics", "node/offer", "node/records"},
	"node/lease":                 {"market/...", "attest/...", "p2p", "internal/...", "node/clock", "node/config", "node/executor", "node/jobstream", "node/metrics", "node/offer", "node/pay", "node/records", "node/transfer", "node/views"},
	"node/renter":                {"market/...", "attest", "p2p", "internal/...", "node/api", "node/clock", "node/config", "node/executor", "node/fault", "node/pay", "node/records", "node/repo", "node/transfer", "node/views"}, // book and trust through its own interfaces
	"node/swarm":                 {"market/...", "p2p", "node/clock", "node/offer"},
	"node/provider":              {"market/...", "attest", "p2p", "node/clock", "node/config", "node/metrics", "node/offer"},
	"node/pay":                   {"market/...", "node/clock", "node/config", "node/records"}, // vouchers and channels, whatever the chain
	"node/pay/evm":               {"node/pay"},                                                // the channel contract on an EVM chain
	"node/doctor":                {"attest", "node/api", "node/config", "node/executor", "node/repo"},
	"node":                       {"market/...", "attest/...", "p2p", "node/...", "internal/..."},
	"cmd/...":                    {"market/...", "attest/...", "node/..."}, // never p2p: it calls node
	"examples/...":               {"node/...", "p2p/...", "market/...", "attest/..."},
	"node/executor/executortest": {"node/executor"},
}

// ruleFor is the most specific rule that covers pkg, and whether one does.
func ruleFor(rules map[string][]string, pkg string) (string, bool) {
	best, found := "", false
	for r := range rules {
		if covers(r, pkg) && (!found || len(strings.TrimSuffix(r, "/...")) > len(strings.TrimSuffix(best, "/..."))) {
			best, found = r, true
		}
	}
	return best, found
}

// covers says whether pattern (a package, or a/... for a and below)
// names pkg.
func covers(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pattern == pkg
}

// layerViolations lists each import in graph (package → the packages of
// ours it imports, relative to the module) that rules forbid, and each
// package no rule covers.
func layerViolations(graph map[string][]string, rules map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		rule, ok := ruleFor(rules, pkg)
		if !ok {
			out = append(out, pkg+": no rule says what it may import")
			continue
		}
		for _, imp := range imports {
			if !slices.ContainsFunc(rules[rule], func(allowed string) bool { return covers(allowed, imp) }) {
				out = append(out, pkg+" imports "+imp+", which its rule ("+rule+") forbids")
			}
		}
	}
	slices.Sort(out)
	return out
}

// importGraph is the module's import graph without tests, from go list.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		graph[pkg] = nil
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				graph[pkg] = append(graph[pkg], rel)
			}
		}
	}
	return graph
}

func TestImportsPointTheWayTheArchitectureSays(t *testing.T) {
	graph := importGraph(t)
	if len(graph) < 10 || graph["node"] == nil {
		t.Fatalf("go list found %d packages: %v", len(graph), graph)
	}
	for _, v := range layerViolations(graph, layers) {
		t.Error(v)
	}
	for pkg, imports := range graph {
		if slices.Contains(imports, "node") && !covers("cmd/...", pkg) && !covers("examples/...", pkg) {
			t.Errorf("%s imports node: nothing does but cmd and examples", pkg)
		}
	}
}

// TestALayerViolationIsFound: the checker finds what the rules forbid.
func TestALayerViolationIsFound(t *testing.T) {
	graph := map[string][]string{
		"market":       {"market/pb"},
		"market/pb":    nil,
		"cmd/idlegrid": {"node", "p2p"},
		"node/new":     nil,
	}
	rules := map[string][]string{"market/...": {"market/..."}, "market/pb": nil, "cmd/...": {"node/..."}}
	want := []string{"cmd/idlegrid imports p2p, which its rule (cmd/...) forbids", "node/new: no rule says what it may import"}
	if got := layerViolations(graph, rules); !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
