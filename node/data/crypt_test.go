package data

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/boxo/blockstore"
	"github.com/ipfs/boxo/datastore/dshelp"
	"github.com/ipfs/go-cid"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestAnEncryptedDatasetsBlocksHoldNoPlaintextAndOnlyItsProviderOpensIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, sums := sampleTree(t, 2, 1<<20+77)
	marker := bytes.Repeat([]byte("PLAINTEXT-MARKER "), 64)
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), marker, 0o644); err != nil {
		t.Fatal(err)
	}
	sums["secret.txt"] = sha256.Sum256(marker)
	renter, prov := newPeer(t, transports[0].listen, DefaultExchangeLimits), newPeer(t, transports[0].listen, DefaultExchangeLimits)
	d, err := renter.s.AddEncrypted(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Encrypted || d.Key == "" {
		t.Fatalf("added %+v; want it encrypted with a key", d)
	}
	// The provider fetches and caches it: ciphertext only.
	link(t, prov, renter)
	root := cid.MustParse(d.CID)
	if _, err := prov.x.Fetch(ctx, root, d.Bytes, []peer.ID{renter.h.ID()}, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{renter.s, prov.s} {
		keys, err := s.bs.AllKeysChan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k := range keys {
			b, err := s.bs.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b.RawData(), []byte("PLAINTEXT-MARKER")) || bytes.Contains(b.RawData(), []byte("secret.txt")) {
				t.Fatalf("block %s holds plaintext", k)
			}
			n++
		}
		if n == 0 {
			t.Fatal("no blocks kept")
		}
	}
	// The key, sealed to the provider's identity, opens for it alone.
	provKey, provPub, _ := crypto.GenerateEd25519Key(nil)
	otherKey, _, _ := crypto.GenerateEd25519Key(nil)
	sealed, err := SealKey(d.Key, provPub)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(d.Key)) {
		t.Fatal("the sealed key holds the key")
	}
	if _, err := OpenKey(sealed, otherKey); err == nil {
		t.Fatal("another identity opened the sealed key")
	}
	key, err := OpenKey(sealed, provKey)
	if err != nil {
		t.Fatal(err)
	}
	r, err := prov.s.OpenEncrypted(ctx, root, key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	got := map[string][32]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Mode != 0o444 || h.Uid != 0 {
				t.Errorf("%s: mode %o, uid %d; want 0444 and root's", h.Name, h.Mode, h.Uid)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			got[h.Name] = sha256.Sum256(b)
		}
	}
	if len(got) != len(sums) {
		t.Fatalf("the tar holds %d files, the dataset %d", len(got), len(sums))
	}
	for name, want := range sums {
		if got[name] != want {
			t.Errorf("%s: its SHA-256 differs from the file added", name)
		}
	}
	// A block changed in the cache fails the read, never passes on.
	var leaf cid.Cid
	if _, _, err := prov.s.walk(ctx, root, func(c cid.Cid) {
		if c.Type() == cid.Raw {
			leaf = c
		}
	}); err != nil {
		t.Fatal(err)
	}
	b, err := prov.s.bs.Get(ctx, leaf)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(b.RawData())
	bad[len(bad)/2] ^= 1
	if err := prov.s.d.Put(ctx, ds.NewKey("/data").Child(blockstore.BlockPrefix).Child(dshelp.MultihashToDsKey(leaf.Hash())), bad); err != nil {
		t.Fatal(err)
	}
	r2, err := prov.s.OpenEncrypted(ctx, root, key)
	if err == nil {
		_, err = io.Copy(io.Discard, r2)
		r2.Close()
	}
	if err == nil {
		t.Fatal("a changed block was read as the dataset's")
	}
}
