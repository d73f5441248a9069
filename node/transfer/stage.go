package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Stage is a provider's store of the tars renters upload before their
// leases, under one folder: a folder per renter, a file per tar named by
// its SHA-256, ".part" until all of it arrived and its hash checked. A
// renter's part file is what a resumed upload goes on from.
//
// It bounds what one renter may keep: one tar's size, the bytes of all of
// its tars, and how many; and it forgets tars older than Keep. It is safe
// for concurrent use.
type Stage struct {
	dir   string
	rules StageRules
	mu    sync.Mutex
	busy  map[string]bool // the part files being written, by path
}

// StageRules bound what renters may keep staged.
type StageRules struct {
	MaxBytes  int64         // one tar
	PerRenter int64         // all of one renter's tars, parts included
	MaxFiles  int           // one renter's tars, parts included
	Keep      time.Duration // since a tar was last written
}

// busyWait is how long a resumed upload waits for the stream it resumes
// to let go of the part, polling every busyPoll.
const (
	busyWait = 5 * time.Second
	busyPoll = 20 * time.Millisecond
)

// Staged is one tar kept for a renter.
type Staged struct {
	Path string
	Size int64
}

// NewStage opens (creating) the stage in dir.
func NewStage(dir string, rules StageRules) (*Stage, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Stage{dir: dir, rules: rules, busy: map[string]bool{}}, nil
}

func (s *Stage) paths(renter peer.ID, sum []byte) (done, part string) {
	base := filepath.Join(s.dir, renter.String(), hex.EncodeToString(sum))
	return base + ".tar", base + ".part"
}

// Begin starts, or resumes, renter's upload of the tar of size bytes with
// SHA-256 sum: it returns how many of its bytes the stage holds, and the
// part to write the rest to (nil when it holds the whole tar).
func (s *Stage) Begin(renter peer.ID, sum []byte, size int64) (have int64, p *Part, err error) {
	if len(sum) != sha256.Size {
		return 0, nil, fmt.Errorf("a %d-byte SHA-256", len(sum))
	}
	if size <= 0 || size > s.rules.MaxBytes {
		return 0, nil, fmt.Errorf("a tar of %d bytes: this provider takes tars of 1 to %d bytes (jobs.max_upload_mib)", size, s.rules.MaxBytes)
	}
	done, part := s.paths(renter, sum)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A stream that broke may not have let go of its part yet when the
	// renter resumes on a new one.
	for wait := busyWait; s.busy[part] && wait > 0; wait -= busyPoll {
		s.mu.Unlock()
		time.Sleep(busyPoll)
		s.mu.Lock()
	}
	s.sweepLocked(renter)
	if fi, err := os.Stat(done); err == nil && fi.Size() == size {
		os.Chtimes(done, time.Now(), time.Now()) // kept for its lease
		return size, nil, nil
	}
	if s.busy[part] {
		return 0, nil, errors.New("this tar is being uploaded already")
	}
	files, bytes := s.heldLocked(renter)
	have = 0
	if fi, err := os.Stat(part); err == nil {
		have = fi.Size()
		files--
		bytes -= have
	}
	switch {
	case files+1 > s.rules.MaxFiles:
		return 0, nil, fmt.Errorf("this renter keeps %d tars here already; at most %d", files, s.rules.MaxFiles)
	case bytes+size > s.rules.PerRenter:
		return 0, nil, fmt.Errorf("this renter keeps %d bytes here already; with %d more it would pass %d", bytes, size, s.rules.PerRenter)
	}
	if have > size {
		have = 0
	}
	if err := os.MkdirAll(filepath.Dir(part), 0o700); err != nil {
		return 0, nil, err
	}
	f, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, nil, err
	}
	if err = f.Truncate(have); err == nil {
		_, err = f.Seek(have, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return 0, nil, err
	}
	// The hash runs as the bytes arrive; a resumed part's first bytes
	// are hashed from the file once.
	h := sha256.New()
	if have > 0 {
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, have)); err != nil {
			f.Close()
			return 0, nil, err
		}
	}
	s.busy[part] = true
	return have, &Part{s: s, f: f, h: h, n: have, sum: sum, size: size, done: done, part: part}, nil
}

// heldLocked counts renter's staged files and their bytes.
func (s *Stage) heldLocked(renter peer.ID) (files int, bytes int64) {
	ents, _ := os.ReadDir(filepath.Join(s.dir, renter.String()))
	for _, e := range ents {
		if n := e.Name(); !strings.HasSuffix(n, ".tar") && !strings.HasSuffix(n, ".part") {
			continue // a lease's outputs, bounded apart
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			files, bytes = files+1, bytes+fi.Size()
		}
	}
	return files, bytes
}

// sweepLocked removes renter's tars and parts not written for Keep.
func (s *Stage) sweepLocked(renter peer.ID) {
	dir := filepath.Join(s.dir, renter.String())
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		keep := s.rules.Keep
		if !strings.HasSuffix(p, ".tar") && !strings.HasSuffix(p, ".part") {
			keep = OutputKeep
		}
		if fi, err := e.Info(); err == nil && !s.busy[p] && time.Since(fi.ModTime()) > keep {
			os.Remove(p)
		}
	}
}

// Sweep removes every tar and part not written for Keep.
func (s *Stage) Sweep() {
	ents, _ := os.ReadDir(s.dir)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		if id, err := peer.Decode(e.Name()); err == nil {
			s.sweepLocked(id)
		}
	}
}

// Get returns renter's whole tar of size bytes with SHA-256 sum.
func (s *Stage) Get(renter peer.ID, sum []byte, size int64) (Staged, error) {
	done, _ := s.paths(renter, sum)
	fi, err := os.Stat(done)
	if err != nil || fi.Size() != size {
		return Staged{}, fmt.Errorf("no uploaded tar %x of %d bytes from this renter", sum, size)
	}
	return Staged{Path: done, Size: size}, nil
}

// Remove forgets renter's tar with SHA-256 sum.
func (s *Stage) Remove(renter peer.ID, sum []byte) {
	done, _ := s.paths(renter, sum)
	os.Remove(done)
}

// Part is an upload being written.
type Part struct {
	s          *Stage
	f          *os.File
	h          hash.Hash // of the bytes written so far
	n          int64
	sum        []byte
	size       int64
	done, part string
}

// Write writes b to the part's file and hashes it; a large b is hashed
// while the file takes it, since hashing is as slow as the network here.
// Bytes hashed but not written do not matter: a short write fails the
// upload, and a resume hashes the file again.
func (p *Part) Write(b []byte) (int, error) {
	if len(b) < hashAsideFrom {
		n, err := p.f.Write(b)
		p.h.Write(b[:n])
		p.n += int64(n)
		return n, err
	}
	hashed := make(chan struct{})
	go func() {
		p.h.Write(b)
		close(hashed)
	}()
	n, err := p.f.Write(b)
	<-hashed
	p.n += int64(n)
	return n, err
}

// hashAsideFrom is the size from which Write hashes beside the write.
const hashAsideFrom = 32 << 10

// Finish checks the whole tar against its SHA-256: it keeps it under its
// name, or removes it and says so.
func (p *Part) Finish() error {
	defer p.release()
	if err := p.f.Close(); err != nil {
		return err
	}
	if got := p.h.Sum(nil); p.n != p.size || string(got) != string(p.sum) {
		os.Remove(p.part)
		return fmt.Errorf("the tar arrived as %d bytes with SHA-256 %x; want %d bytes with %x: dropped", p.n, got, p.size, p.sum)
	}
	return os.Rename(p.part, p.done)
}

// Abort keeps what arrived, for a resume.
func (p *Part) Abort() {
	p.f.Close()
	p.release()
}

func (p *Part) release() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	delete(p.s.busy, p.part)
}

// OutputKeep is how long a lease's packed outputs wait for its renter,
// and MaxOutputsKept bounds how many one renter has kept at once (the
// outputs its leases name and what idlegrid cp packs).
const (
	OutputKeep     = 24 * time.Hour
	MaxOutputsKept = 32
)

func (s *Stage) outputPath(renter peer.ID, lease string, index int) string {
	return filepath.Join(s.dir, renter.String(), fmt.Sprintf("%s.%d.out", lease, index))
}

// PutOutput keeps the tar r carries, renter's output index of lease, for
// it to download: at most MaxBytes, hashed as it arrives. A tar cut short
// (r's error) or too large is not kept.
func (s *Stage) PutOutput(renter peer.ID, lease string, index int, r io.Reader) error {
	p := s.outputPath(renter, lease, index)
	if kept, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "*.out")); len(kept) >= MaxOutputsKept {
		io.Copy(io.Discard, r) // let the packer finish
		return fmt.Errorf("this renter has %d outputs kept here already, at most %d, for %s each", len(kept), MaxOutputsKept, OutputKeep)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.Create(p + ".part")
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, s.rules.MaxBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > s.rules.MaxBytes {
		err = fmt.Errorf("output %d of lease %s: more than %d bytes (jobs.max_upload_mib): not kept", index, lease, s.rules.MaxBytes)
		io.Copy(io.Discard, r) // let the packer finish
	}
	if err == nil {
		err = os.WriteFile(p+".sha256", h.Sum(nil), 0o600)
	}
	if err == nil {
		err = os.Rename(p+".part", p)
	}
	if err != nil {
		os.Remove(p + ".part")
		os.WriteFile(p+".err", []byte(err.Error()), 0o600)
	}
	return err
}

// Output opens renter's output index of lease: the tar, its size and its
// SHA-256, or why it was not kept.
func (s *Stage) Output(renter peer.ID, lease string, index int) (f *os.File, size int64, sum []byte, err error) {
	p := s.outputPath(renter, lease, index)
	if why, err := os.ReadFile(p + ".err"); err == nil {
		return nil, 0, nil, errors.New(string(why))
	}
	sum, err = os.ReadFile(p + ".sha256")
	if err != nil {
		return nil, 0, nil, fmt.Errorf("no output %d of lease %s for this renter here", index, lease)
	}
	if f, err = os.Open(p); err != nil {
		return nil, 0, nil, fmt.Errorf("no output %d of lease %s for this renter here", index, lease)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return f, fi.Size(), sum, nil
}
