package data

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/ipfs/go-cid"
	pebbleds "github.com/ipfs/go-ds-pebble"
)

// openStore opens a store on a real pebble datastore in dir.
func openStore(t *testing.T, dir string, limit int64, clk clock.Clock) (*Store, func()) {
	t.Helper()
	d, err := pebbleds.NewDatastore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return Open(d, limit, clk), func() { d.Close() }
}

// tree writes files (name → bytes) under a new folder and returns it.
func tree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "set")
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func mustCID(t *testing.T, s string) cid.Cid {
	t.Helper()
	c, err := cid.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A folder goes in as a CIDv1 DAG and comes out byte for byte, after the
// store is closed and opened again; the same bytes imported on another
// node get the same CID.
func TestADatasetRoundTripsByItsCID(t *testing.T) {
	ctx := context.Background()
	src := map[string][]byte{"weights.bin": random(3*ChunkBytes + 12345), "cfg/model.json": []byte(`{"layers": 2}`), "empty": nil}
	dir := tree(t, src)
	dbdir := t.TempDir()
	s, closeStore := openStore(t, dbdir, 1<<30, nil)
	d, err := s.Add(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	c := mustCID(t, d.CID)
	if c.Version() != 1 || d.Name != "set" || d.Blocks < 5 || d.Bytes < int64(3*ChunkBytes) {
		t.Errorf("dataset %+v: want CIDv1, named set, the 4 chunks of weights.bin and more", d)
	}
	closeStore()
	s, closeStore = openStore(t, dbdir, 1<<30, nil)
	defer closeStore()
	out := filepath.Join(t.TempDir(), "out")
	if err := s.Export(ctx, c, out); err != nil {
		t.Fatal(err)
	}
	for name, want := range src {
		if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes back (%v), want %d", name, len(got), err, len(want))
		}
	}
	other, closeOther := openStore(t, t.TempDir(), 1<<30, nil)
	defer closeOther()
	if again, err := other.Add(ctx, dir, false); err != nil || again.CID != d.CID {
		t.Errorf("the same folder on another node: %s (%v), want %s", again.CID, err, d.CID)
	}
}

// What a dataset cannot hold is refused with the path named, and nothing
// is kept: a symbolic link, a folder larger than the cache.
func TestAddRefusesLinksAndWhatTheCacheCannotHold(t *testing.T) {
	ctx := context.Background()
	s, closeStore := openStore(t, t.TempDir(), 2*ChunkBytes, nil)
	defer closeStore()
	dir := tree(t, map[string][]byte{"a": []byte("a")})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, dir, false); err == nil || !bytes.Contains([]byte(err.Error()), []byte("link: a symbolic link")) {
		t.Errorf("a folder with a link: %v", err)
	}
	big := tree(t, map[string][]byte{"big": random(3 * ChunkBytes)})
	if _, err := s.Add(ctx, big, true); !errors.Is(err, ErrTooBig) {
		t.Errorf("a folder larger than the cache: %v, want ErrTooBig", err)
	}
	if ls, err := s.List(ctx); err != nil || len(ls) != 0 {
		t.Errorf("kept after refusals: %+v, %v", ls, err)
	}
}

// The cache holds its bound by evicting the dataset used longest ago,
// never a pinned one nor one a lease uses; a block two datasets share
// stays until neither holds it.
func TestTheCacheEvictsTheLeastRecentlyUsedOnly(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake()
	// Five chunks, and room for the folders' and files' small nodes.
	const limit = 5*ChunkBytes + 64<<10
	s, closeStore := openStore(t, t.TempDir(), limit, clk)
	defer closeStore()
	shared := random(ChunkBytes) // one whole chunk: one block in both
	add := func(name string, pin bool, files map[string][]byte) Dataset {
		t.Helper()
		clk.Advance(time.Second)
		d, err := s.Add(ctx, tree(t, files), pin)
		if err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
		return d
	}
	pinned := add("pinned", true, map[string][]byte{"p": random(ChunkBytes)})
	used := add("used", false, map[string][]byte{"u": random(ChunkBytes)})
	old := add("old", false, map[string][]byte{"o": append(bytes.Clone(shared), random(100)...)})
	sharer := add("sharer", false, map[string][]byte{"s": append(bytes.Clone(shared), random(200)...)})
	release, err := s.Use(ctx, mustCID(t, used.CID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, mustCID(t, used.CID)); !errors.Is(err, ErrInUse) {
		t.Errorf("removing a dataset in use: %v, want ErrInUse", err)
	}
	// 4 chunks and a bit kept; a fifth and a sixth go over the bound.
	clk.Advance(time.Second)
	touch, err := s.Use(ctx, mustCID(t, sharer.CID)) // sharer is used after old
	if err != nil {
		t.Fatal(err)
	}
	touch()
	newest := add("newest", false, map[string][]byte{"n": random(2 * ChunkBytes)})
	kept := map[string]bool{}
	ls, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range ls {
		kept[d.CID], total = true, total+d.Bytes
	}
	for name, want := range map[string]struct {
		d    Dataset
		kept bool
	}{
		"pinned": {pinned, true}, "in use": {used, true}, "least recently used": {old, false},
		"used since": {sharer, true}, "newest": {newest, true},
	} {
		if kept[want.d.CID] != want.kept {
			t.Errorf("%s: kept %v, want %v", name, kept[want.d.CID], want.kept)
		}
	}
	if total > limit {
		t.Errorf("%d bytes kept, over the bound of %d", total, limit)
	}
	// The chunk old shared with sharer stayed when old went.
	if err := s.Export(ctx, mustCID(t, sharer.CID), filepath.Join(t.TempDir(), "s")); err != nil {
		t.Errorf("the dataset that shared a block with the evicted one: %v", err)
	}
	release()
	if _, err := s.Remove(ctx, mustCID(t, used.CID)); err != nil {
		t.Errorf("removing it once released: %v", err)
	}
	if _, err := s.Get(ctx, mustCID(t, used.CID)); !errors.Is(err, ErrNotFound) {
		t.Errorf("after its removal: %v, want ErrNotFound", err)
	}
}
