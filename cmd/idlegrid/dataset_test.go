package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
)

// A dataset added with no daemon is there when the daemon runs, and one
// added or removed through the daemon is so without it; what a dataset
// cannot hold is refused in one line naming it, and nothing is kept.
func TestDatasetsThroughTheRepositoryAndTheDaemon(t *testing.T) {
	t.Parallel()
	dir := newRepo(t, "--profile", "renter")
	set := func(name, body string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "weights.bin"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := jsonOf[api.DatasetView](t, runCLI(t, "dataset", "add", set("first", "one"), "--pin", "--json", "--repo", dir))
	if !strings.HasPrefix(first.CID, "bafy") || !first.Pinned || first.Name != "first" {
		t.Fatalf("dataset add --pin: %+v", first)
	}
	linked := set("linked", "two")
	if err := os.Symlink("/etc/passwd", filepath.Join(linked, "passwd")); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "dataset", "add", linked, "--repo", dir)
	if r.code == 0 || !strings.Contains(r.lastLine(), filepath.Join(linked, "passwd")+": a symbolic link") {
		t.Errorf("dataset add of a folder with a link: exit %d, %q; want a failure naming the link", r.code, r.lastLine())
	}
	cids := func(bin string) []string {
		var out []string
		for _, d := range mustJSON[[]api.DatasetView](t, bin, "dataset", "ls", "--json", "--repo", dir) {
			out = append(out, d.CID)
		}
		return out
	}

	bin := buildBinary(t)
	d := startDaemon(t, bin, dir)
	waitUp(t, bin, d)
	if got := cids(bin); !slices.Equal(got, []string{first.CID}) {
		t.Errorf("the daemon's datasets: %v, want the one added before it ran, %s", got, first.CID)
	}
	second := mustJSON[api.DatasetView](t, bin, "dataset", "add", set("second", "three"), "--json", "--repo", dir)
	if out, err := exec.Command(bin, "dataset", "rm", first.CID, "--repo", dir).Output(); err != nil || !strings.Contains(string(out), "removed "+first.CID) {
		t.Errorf("dataset rm through the daemon: %v, %q", err, out)
	}
	d.stop(t)
	if got := cids(bin); !slices.Equal(got, []string{second.CID}) {
		t.Errorf("the repository's datasets after the daemon: %v, want the one added through it, %s", got, second.CID)
	}
}
