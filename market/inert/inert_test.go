package inert

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile holds what a peer put in a gossiped model name to take over a
// terminal: a screen clear, a window title (OSC 0), a clipboard write
// (OSC 52), a bell, a C1 CSI, DEL, a bidi override and isolate, a line
// separator and a byte that is not UTF-8.
const hostile = "H100\x1b[2J\x1b]0;pwned\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\u009b31m\x7f\u202egnp.exe\u2066x\u2069\u2028\xff\r\n\tend"

// forbidden are the bytes and runes none of which may reach a person.
func forbidden(s string) []string {
	var bad []string
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r < 0x20 || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c || r == 0x2028 || r == 0x2029 {
			bad = append(bad, s[i:i+size])
		}
		i += size
	}
	return bad
}

func TestTextLeavesNothingATerminalActsOn(t *testing.T) {
	got := Text(hostile)
	if bad := forbidden(got); len(bad) > 0 {
		t.Fatalf("Text(%q) = %q keeps %q", hostile, got, bad)
	}
	want := `H100\x1b[2J\x1b]0;pwned\a\x1b]52;c;Y3VybCBldmlsIHwgc2g=\a\u009b31m\x7f\u202egnp.exe\u2066x\u2069\u2028\xff\r\n\tend`
	if got != want {
		t.Errorf("Text(hostile)\n got %s\nwant %s", got, want)
	}
}

func TestTextKeepsPrintableTextAsItIs(t *testing.T) {
	for _, s := range []string{"", "H100 SXM 80GB", "RTX 4090", "Zürich – Rechenzentrum №1", "東京", "A100 ✓", `C:\path`} {
		if got := Text(s); got != s {
			t.Errorf("Text(%q) = %q, want it unchanged", s, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Text("H100 SXM 80GB") }); n != 0 {
		t.Errorf("Text of clean text allocates %v times", n)
	}
}

type view struct {
	Model   string
	Tiers   []string
	Inner   *view
	Labels  map[string]string
	Any     any
	private string
}

func TestStringsMendsEveryStringOfAView(t *testing.T) {
	vs := []view{{
		Model:   hostile,
		Tiers:   []string{"gold", hostile},
		Inner:   &view{Model: hostile},
		Labels:  map[string]string{hostile: hostile},
		Any:     hostile,
		private: hostile,
	}}
	Strings(vs)
	v := vs[0]
	all := strings.Join([]string{v.Model, v.Tiers[0], v.Tiers[1], v.Inner.Model, v.Any.(string)}, "|")
	for k, l := range v.Labels {
		all += "|" + k + "|" + l
	}
	if bad := forbidden(all); len(bad) > 0 {
		t.Errorf("after Strings a view keeps %q: %+v", bad, v)
	}
	if v.Tiers[0] != "gold" || v.Model != Text(hostile) || len(v.Labels) != 1 {
		t.Errorf("Strings changed more than the unsafe runes: %+v", v)
	}
	if v.private != hostile {
		t.Errorf("Strings reached an unexported field")
	}
	Strings(view{Model: hostile}) // not a pointer: left alone, no panic
}

func FuzzText(f *testing.F) {
	f.Add(hostile)
	f.Add("H100")
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if bad := forbidden(got); len(bad) > 0 {
			t.Fatalf("Text(%q) = %q keeps %q", s, got, bad)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q is not UTF-8", s, got)
		}
		if firstUnsafe(s) < 0 && got != s {
			t.Fatalf("Text changed clean %q to %q", s, got)
		}
	})
}
