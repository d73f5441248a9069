// Package transfer moves a renter's files to and from a lease as tars:
// written and read with every regular file's SHA-256 noted, and, for the
// data a lease takes in, staged at the provider before the lease, each tar
// named by its SHA-256, resumable where an upload broke off. The stage
// bounds what renters keep there, each and all together, and frees it on
// a clock.
//
// transfer imports the standard library, libp2p's peer IDs and node/clock;
// it must never import node or cmd.
package transfer

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// TarTree writes local as a tar whose top entry is named name, noting
// each regular file's SHA-256 by its name in the tar.
func TarTree(w io.Writer, local, name string, sums map[string]string, size *int64) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		tname := path.Join(name, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: tname + "/", Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()})
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s: only files and folders are copied, not %s", p, info.Mode().Type())
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: tname, Mode: int64(info.Mode().Perm()), Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(tw, h), f)
		if err != nil {
			return err
		}
		sums[tname], *size = hex.EncodeToString(h.Sum(nil)), *size+n
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// UntarTree writes the tar r carries, whose entries all lie under name,
// to target (name's place), noting each file's SHA-256 by its name in the
// tar. An entry outside name, a link or a device is refused: the far side
// is not trusted to say where things go.
func UntarTree(r io.Reader, name, target string, sums map[string]string, size *int64) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := path.Clean(h.Name)
		rel, ok := strings.CutPrefix(clean, name)
		if !ok || clean != name && !strings.HasPrefix(rel, "/") || clean == ".." || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
			return fmt.Errorf("an entry %q outside %q: refused", h.Name, name)
		}
		dst := filepath.Join(target, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm()|0o600)
			if err != nil {
				return err
			}
			hash := sha256.New()
			n, err := io.Copy(io.MultiWriter(f, hash), tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			sums[clean], *size = hex.EncodeToString(hash.Sum(nil)), *size+n
		default:
			return fmt.Errorf("an entry %q of type %q: only files and folders are copied", h.Name, h.Typeflag)
		}
	}
}

// Packed is a local file or folder written as a tar, to be unpacked at
// Dest in a lease's container: its top entry is named Dest's base.
type Packed struct {
	Path string // the tar, a temporary file
	Sum  []byte // its SHA-256
	Size int64
	Dest string
	// Sums are the SHA-256 of each file by its name in the tar, and
	// Bytes the files' bytes in all.
	Sums  map[string]string
	Bytes int64
}

// packPrefix begins the name of each tar Pack writes; the writing
// process's ID follows it, so that a later process can tell the tars
// a killed one left (see SweepPacked).
const packPrefix = "idlegrid-upload-"

// Pack writes local as a tar for dest into a new file in dir (the
// system's temporary folder if empty); Remove the Packed when done.
func Pack(local, dest, dir string) (Packed, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("%s%d-*.tar", packPrefix, os.Getpid()))
	if err != nil {
		return Packed{}, err
	}
	h := sha256.New()
	var size int64
	sums := map[string]string{}
	err = TarTree(io.MultiWriter(f, h), local, path.Base(dest), sums, &size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	fi, serr := os.Stat(f.Name())
	if err == nil {
		err = serr
	}
	if err != nil {
		os.Remove(f.Name())
		return Packed{}, fmt.Errorf("pack %s: %w", local, err)
	}
	return Packed{Path: f.Name(), Sum: h.Sum(nil), Size: fi.Size(), Dest: dest, Sums: sums, Bytes: size}, nil
}

// Remove removes the tar.
func (p Packed) Remove() { os.Remove(p.Path) }

// SweepPacked removes from dir (the system's temporary folder if empty)
// the tars Pack wrote in processes that no longer run: a rent killed
// while it uploaded leaves its tar, which may be as big as its upload,
// and nothing else removes it. A tar whose process runs is left, and so
// is one of another user (its removal fails). It returns how many it
// removed.
func SweepPacked(dir string) int {
	if dir == "" {
		dir = os.TempDir()
	}
	names, _ := filepath.Glob(filepath.Join(dir, packPrefix+"*-*.tar"))
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(name), packPrefix), "-", 2)[0])
		if err != nil || pid <= 0 || processRuns(pid) {
			continue
		}
		if os.Remove(name) == nil {
			n++
		}
	}
	return n
}

// Open opens the tar from offset on.
func (p Packed) Open(offset int64) (io.ReadCloser, error) {
	f, err := os.Open(p.Path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
