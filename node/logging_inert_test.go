package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idlegrid/idlegrid/node/config"
)

// A peer's text in a log line (an offer's model, a refusal's reason)
// reaches the operator's terminal escaped: the text handler quotes any
// value or message with a control, bidi or other unprintable rune.
func TestPeerTextInTheLogsIsInert(t *testing.T) {
	const hostile = "H100\x1b[2J\x1b]0;pwned\x07\x1b]52;c;Y3VybA==\x07\u009b31m\x7f\u202egnp\u2066\nFAKE level=ERROR"
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(&buf, config.LogConfig{Format: "text", Level: "debug"})).With("subsystem", LogP2P)
	log.Info("offer from "+hostile, "model", hostile, "err", errString(hostile))
	out := buf.String()
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRuneInString(out[i:])
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			t.Fatalf("the log line holds %q at %d: %q", r, i, out)
		}
		i += size
	}
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("one record wrote %d lines: %q", n, out)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
