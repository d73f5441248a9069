package transfer

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What the far side sends is not trusted to say where it goes: an entry
// outside the name copied, a link or a device is refused, and nothing is
// written outside the target.
func TestUntarKeepsToItsTarget(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"parent":    {{Name: "out/../../escape", Typeflag: tar.TypeReg}},
		"absolute":  {{Name: "/etc/escape", Typeflag: tar.TypeReg}},
		"sibling":   {{Name: "outer/x", Typeflag: tar.TypeReg}},
		"a symlink": {{Name: "out/l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
		"a device":  {{Name: "out/d", Typeflag: tar.TypeChar}},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			tw.WriteHeader(&h)
		}
		tw.Close()
		dir := t.TempDir()
		var size int64
		err := UntarTree(&b, "out", filepath.Join(dir, "target"), map[string]string{}, &size)
		if err == nil {
			t.Errorf("%s: taken", name)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s: wrote %v", name, left)
		}
	}
	// And a good tree round-trips, with its sums.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("x"), 0o644)
	var b bytes.Buffer
	in, out := map[string]string{}, map[string]string{}
	var n1, n2 int64
	if err := TarTree(&b, src, "out", in, &n1); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := UntarTree(&b, "out", target, out, &n2); err != nil || len(in) != 1 || in["out/d/f"] != out["out/d/f"] || n1 != 1 || n2 != 1 {
		t.Errorf("round trip: %v, sums %v and %v", err, in, out)
	}
	if got, _ := os.ReadFile(filepath.Join(target, "d", "f")); !strings.EqualFold(string(got), "x") {
		t.Errorf("round trip wrote %q", got)
	}
}
