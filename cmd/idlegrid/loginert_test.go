package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
)

// A peer's text in the daemon's JSON log (a refusal's reason, an offer's
// model) reaches an operator's terminal inert: JSON escapes C0 controls,
// and the handler the daemon builds escapes C1 controls and bidi
// overrides too; each line is still one JSON object.
func TestPeerTextInJSONLogsIsInert(t *testing.T) {
	var buf bytes.Buffer
	h := newLogHandler(&buf, config.LogConfig{Format: "json", Level: "debug", Subsystems: map[string]string{}})
	log := slog.New(h).With("subsystem", node.LogP2P, "peer_label", hostileText)
	log.Info("offer from "+hostileText, "model", hostileText, "err", errors.New(hostileText),
		slog.Group("offer", slog.String("region", hostileText)))
	log.WithGroup("g").Warn("x", "a", hostileText)
	out := buf.String()
	if bad := actingBytes(strings.ReplaceAll(out, "\n", "")); len(bad) > 0 {
		t.Errorf("the JSON log holds %q:\n%s", bad, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("not JSON: %v: %s", err, l)
		}
	}
}
