package node

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idlegrid/idlegrid/node/config"
)

// TestPeerTextOnTheDashboardIsInert: a stranger's offer names its GPU
// model with a bidi override, an isolate, a zero-width joiner and
// control characters; the dashboard's market page lists it, and what it
// shows holds none of them, only their escapes (the API keeps the text
// exact).
func TestPeerTextOnTheDashboardIsInert(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	viewer := startNode(t, testRepo(t, "viewer", bootstrapFrom(boot)), Options{})
	const hostile = "H100\u202eSXM\u2066\u200d\x1b[2J\x07"
	cfg := config.DefaultProviderConfig()
	cfg.GPUs = []config.GPUConfig{{Model: hostile, Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	cfg.Price = "1.00"
	publishStrangers(t, boot, cfg, 1)
	waitFor(t, 20*time.Second, "the viewer's book holds the stranger's offer", bookHolds(viewer, 1))

	signIn(t, b, viewer)
	b.until(15*time.Second, "the stranger's offer on the market page", `!!document.querySelector('#cheapest tbody tr[data-provider]')`)
	shown := eval[string](b, `document.querySelector('#page-market').textContent`)
	for i, r := range shown {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == 0x202e || r == 0x2066 || r == 0x200d || r == utf8.RuneError {
			t.Fatalf("the market page shows %U at %d: %q", r, i, shown)
		}
	}
	if want := `H100\u202eSXM\u2066\u200d\u001b[2J\u0007`; !strings.Contains(shown, want) {
		t.Errorf("the market page does not show the model escaped as %s:\n%q", want, shown)
	}
	b.noErrors("market")
}
