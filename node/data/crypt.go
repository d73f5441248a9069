package data

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"github.com/ipfs/boxo/blockservice"
	"github.com/ipfs/boxo/blockstore"
	"github.com/ipfs/boxo/files"
	"github.com/ipfs/boxo/ipld/merkledag"
	unixfile "github.com/ipfs/boxo/ipld/unixfs/file"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"golang.org/x/crypto/ssh"
)

// An encrypted dataset is one file: a tar of the files and folders added
// (names, sizes and bytes alike), encrypted with age (X25519 and
// ChaCha20-Poly1305, in 64 KiB chunks, each authenticated) before it is
// chunked and hashed. Its key, a fresh age identity, stays in this node's
// index; a lease carries it sealed to its provider's identity key, which
// alone opens it.

// ErrNotSealable is a provider identity a dataset's key cannot be sealed
// to: only Ed25519 keys can.
var ErrNotSealable = errors.New("an encrypted dataset's key is sealed to Ed25519 identities only")

// AddEncrypted imports the file or folder at path as an encrypted
// dataset under a fresh key, pinned or not. The same bytes added twice
// are two datasets: each has a key of its own.
func (s *Store) AddEncrypted(ctx context.Context, path string, pin bool) (Dataset, error) {
	if _, err := s.fits(path); err != nil {
		return Dataset{}, err
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return Dataset{}, err
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(sealTree(pw, path, id.Recipient()))
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := importFile(ctx, s.dag, pr)
	pr.CloseWithError(err)
	if err != nil {
		return Dataset{}, fmt.Errorf("import %s: %w", path, err)
	}
	now := s.clock.Now().UnixMilli()
	d := Dataset{CID: root.Cid().String(), Name: filepath.Base(path), Pinned: pin, Added: now, Used: now, Encrypted: true, Key: id.String()}
	if d.Blocks, d.Bytes, err = s.walk(ctx, root.Cid(), nil); err != nil {
		return Dataset{}, err
	}
	if err := s.put(ctx, d); err != nil {
		return Dataset{}, err
	}
	return d, s.evict(ctx, d.CID)
}

// sealTree writes the files and folders in the folder path (or the file
// path) as a tar, encrypted to r. Entries are owned by root, folders
// 0755 and files 0444: what a job reads, never writes.
func sealTree(w io.Writer, path string, r age.Recipient) error {
	aw, err := age.Encrypt(w, r)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(aw)
	base := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		base = filepath.Dir(path)
	}
	err = filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: info.ModTime(), Format: tar.FormatPAX}
		switch {
		case e.IsDir():
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			return tw.WriteHeader(h)
		case e.Type().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o444, info.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if n, err := io.Copy(tw, f); err != nil || n != info.Size() {
				return cmp.Or(err, fmt.Errorf("%s changed while it was added", p))
			}
			return nil
		}
		return fmt.Errorf("%s: a %s; %w", p, kind(e.Type()), ErrOnlyFiles)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return aw.Close()
}

// SealKey seals an encrypted dataset's key to the identity key of the
// peer that is to open it.
func SealKey(key string, to crypto.PubKey) ([]byte, error) {
	raw, err := edPublic(to)
	if err != nil {
		return nil, err
	}
	spk, err := ssh.NewPublicKey(raw)
	if err != nil {
		return nil, err
	}
	r, err := agessh.NewEd25519Recipient(spk)
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	w, err := age.Encrypt(&out, r)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(w, key); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return []byte(out.String()), nil
}

// MaxSealedKey bounds a sealed key: its age header and one short chunk.
const MaxSealedKey = 1024

// OpenKey opens a key sealed to own's identity.
func OpenKey(sealed []byte, own crypto.PrivKey) (age.Identity, error) {
	if len(sealed) > MaxSealedKey {
		return nil, fmt.Errorf("a sealed key of %d bytes; at most %d", len(sealed), MaxSealedKey)
	}
	if own.Type() != crypto.Ed25519 {
		return nil, ErrNotSealable
	}
	raw, err := own.Raw()
	if err != nil {
		return nil, err
	}
	id, err := agessh.NewEd25519Identity(ed25519.PrivateKey(raw))
	if err != nil {
		return nil, err
	}
	r, err := age.Decrypt(strings.NewReader(string(sealed)), id)
	if err != nil {
		return nil, fmt.Errorf("the dataset's key: %w", err)
	}
	key, err := io.ReadAll(io.LimitReader(r, MaxSealedKey))
	if err != nil {
		return nil, fmt.Errorf("the dataset's key: %w", err)
	}
	return age.ParseX25519Identity(string(key))
}

func edPublic(k crypto.PubKey) (ed25519.PublicKey, error) {
	if k == nil || k.Type() != crypto.Ed25519 {
		return nil, ErrNotSealable
	}
	raw, err := k.Raw()
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(raw), nil
}

// OpenEncrypted is the tar of the encrypted dataset c, decrypted with
// key as it is read, every block checked against its CID and every chunk
// authenticated: a reader that ends with an error where either fails.
func (s *Store) OpenEncrypted(ctx context.Context, c cid.Cid, key age.Identity) (io.ReadCloser, error) {
	vdag := merkledag.NewDAGService(blockservice.New(&blockstore.ValidatingBlockstore{Blockstore: s.bs}, nil))
	root, err := vdag.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	n, err := unixfile.NewUnixfsFile(ctx, vdag, root)
	if err != nil {
		return nil, err
	}
	f, ok := n.(files.File)
	if !ok {
		n.Close()
		return nil, fmt.Errorf("%s is a folder: an encrypted dataset is one file", c)
	}
	r, err := age.Decrypt(f, key)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{r, f}, nil
}
