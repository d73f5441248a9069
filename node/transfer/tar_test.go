package transfer

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
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

// A tar a killed process left is swept; one of a process that runs, and
// a file not named as Pack names its tars, are left.
func TestSweepPackedRemovesOnlyWhatDeadProcessesLeft(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, fmt.Sprintf("%s%d-1.tar", packPrefix, gone.Process.Pid))
	other := filepath.Join(dir, packPrefix+"x-1.tar")
	for _, name := range []string{dead, other} {
		if err := os.WriteFile(name, []byte("tar"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := filepath.Join(dir, "data")
	os.WriteFile(src, []byte("data"), 0o600)
	live, err := Pack(src, "/workspace/data", dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := SweepPacked(dir); n != 1 {
		t.Errorf("swept %d tars, want the dead process's one", n)
	}
	for name, want := range map[string]bool{dead: false, other: true, live.Path: true} {
		if _, err := os.Stat(name); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(name), err == nil, want)
		}
	}
}
