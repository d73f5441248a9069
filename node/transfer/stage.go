package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Stage is a provider's store of the tars renters upload before their
// leases, and of the outputs their leases leave for them to download,
// under one folder: a folder per renter, a file per tar named by its
// SHA-256, ".part" until all of it arrived and its hash checked. A
// renter's part file is what a resumed upload goes on from.
//
// Anyone can upload, so everything a stranger can make it keep is
// bounded, per renter and in total, and freed on a clock: one tar's size;
// the bytes of all of a renter's tars, parts and outputs, and how many;
// the bytes of every renter's together (Total), and of those of renters
// with no lease here (Strangers). Tars and parts not written for Keep,
// and outputs older than OutputKeep, are removed by a sweep every
// SweepEvery once Start runs, whether their renter comes back or not.
// It is safe for concurrent use.
type Stage struct {
	dir   string
	rules StageRules
	clock clock.Clock
	mu    sync.Mutex
	busy  map[string]charged // the files being written, by path
	used  usage              // every file's charge, the busy ones' included

	cancel context.CancelFunc
	done   chan struct{}
}

// StageRules bound what renters may keep staged.
type StageRules struct {
	MaxBytes  int64         // one tar, one output
	PerRenter int64         // all of one renter's tars, parts and outputs
	MaxFiles  int           // one renter's tars, parts included
	Keep      time.Duration // a tar or part since it was last written; a pack (PacksFrom)
	// Total bounds the bytes of every renter's files together; 0: no
	// bound. Strangers bounds those of the tars and parts of the renters
	// with no lease here (Leased), together; 0: no bound.
	Total, Strangers int64
	// Leased lists the renters that hold a lease here now; nil: none.
	// It is asked with no lock held.
	Leased func() []peer.ID
	// PacksFrom is the first output index of idlegrid cp's packs (below
	// it, a workload's outputs); 0: no packs. A lease keeps at most
	// MaxPacksPerLease packs, the oldest making room for a new one, each
	// for Keep.
	PacksFrom int
	// Clock tells the sweep's time; nil: the system's.
	Clock clock.Clock
}

// SweepEvery is how often a started stage removes what it keeps no longer.
const SweepEvery = time.Minute

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

// NewStage opens (creating) the stage in dir and counts what it holds.
func NewStage(dir string, rules StageRules) (*Stage, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Stage{dir: dir, rules: rules, clock: clock.Or(rules.Clock), busy: map[string]charged{}}
	s.mu.Lock()
	s.sweepAllLocked(false)
	s.mu.Unlock()
	return s, nil
}

// Start sweeps the stage now and every SweepEvery until ctx ends or
// Close.
func (s *Stage) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	s.Sweep()
	tick := s.clock.NewTicker(SweepEvery)
	go func() {
		defer close(s.done)
		defer tick.Stop()
		for {
			select {
			case <-tick.C():
				s.Sweep()
			case <-ctx.Done():
				return
			}
		}
	}()
}

// Close stops the sweep Start started and waits for it.
func (s *Stage) Close() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

// renterDir is renter's folder, which nothing of another renter's names.
func (s *Stage) renterDir(renter peer.ID) (string, error) {
	if err := renter.Validate(); err != nil {
		return "", fmt.Errorf("renter %q: %w", renter, err)
	}
	name := renter.String()
	dir := filepath.Join(s.dir, name)
	if filepath.Dir(dir) != s.dir || filepath.Base(dir) != name {
		return "", fmt.Errorf("renter %q: not a folder name", name)
	}
	return dir, nil
}

func (s *Stage) paths(renter peer.ID, sum []byte) (done, part string, err error) {
	dir, err := s.renterDir(renter)
	if err != nil {
		return "", "", err
	}
	base := filepath.Join(dir, hex.EncodeToString(sum))
	return base + ".tar", base + ".part", nil
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
	done, part, err := s.paths(renter, sum)
	if err != nil {
		return 0, nil, err
	}
	leased := s.leased()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A stream that broke may not have let go of its part yet when the
	// renter resumes on a new one: a killed renter's QUIC connection is
	// not known dead until its idle timeout. The renter's newer stream
	// tells the older to let go (only the same renter writes this part).
	if c, ok := s.busy[part]; ok && c.supersede != nil {
		select {
		case <-c.supersede:
		default:
			close(c.supersede)
		}
	}
	for wait := busyWait; s.isBusy(part) && wait > 0; wait -= busyPoll {
		s.mu.Unlock()
		time.Sleep(busyPoll)
		s.mu.Lock()
	}
	s.sweepRenterLocked(filepath.Dir(part), s.clock.Now())
	if fi, err := os.Stat(done); err == nil && fi.Size() == size {
		now := s.clock.Now()
		os.Chtimes(done, now, now) // kept for its lease
		return size, nil, nil
	}
	if s.isBusy(part) {
		return 0, nil, errors.New("this tar is being uploaded already")
	}
	var onDisk int64 // the part's bytes, counted already
	if fi, err := os.Stat(part); err == nil {
		have, onDisk = fi.Size(), charge(fi.Size())
	}
	if err := s.admitLocked(renter, leased, charge(size), onDisk); err != nil {
		return 0, nil, err
	}
	if have > size {
		have = 0
	}
	if err := s.mkdirLocked(filepath.Dir(part)); err != nil {
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
	// The part is charged its whole size while it is written.
	s.used.uploads += charge(size) - onDisk
	sup := make(chan struct{})
	s.busy[part] = charged{bytes: charge(size), supersede: sup}
	return have, &Part{s: s, f: f, h: h, n: have, sum: sum, size: size, done: done, part: part, superseded: sup}, nil
}

// leased is the renters with a lease here now.
func (s *Stage) leased() []peer.ID {
	if s.rules.Leased == nil {
		return nil
	}
	return s.rules.Leased()
}

// Sweep removes every tar and part not written for Keep, and every output
// older than its keep, and counts what is left.
func (s *Stage) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepAllLocked(true)
}

// Get returns renter's whole tar of size bytes with SHA-256 sum.
func (s *Stage) Get(renter peer.ID, sum []byte, size int64) (Staged, error) {
	done, _, err := s.paths(renter, sum)
	if err != nil {
		return Staged{}, err
	}
	fi, err := os.Stat(done)
	if err != nil || fi.Size() != size {
		return Staged{}, fmt.Errorf("no uploaded tar %x of %d bytes from this renter", sum, size)
	}
	return Staged{Path: done, Size: size}, nil
}

// Remove forgets renter's tar with SHA-256 sum.
func (s *Stage) Remove(renter peer.ID, sum []byte) {
	done, _, err := s.paths(renter, sum)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(done)
}

// Used is the bytes the stage holds, every renter's, as its bounds count
// them: each file rounded up to whole blocks, a file being written at
// the most it may take, and a block for each renter's folder.
func (s *Stage) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used.total()
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
	superseded chan struct{} // closed when a newer stream resumes this part
}

// Superseded is closed when the renter resumes this tar on a newer
// stream: the stream writing this part should let go of it (Abort).
func (p *Part) Superseded() <-chan struct{} { return p.superseded }

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
	cerr := p.f.Close()
	got := p.h.Sum(nil)
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(p.part)
	switch {
	case cerr != nil:
		os.Remove(p.part)
		return cerr
	case p.n != p.size || string(got) != string(p.sum):
		os.Remove(p.part)
		return fmt.Errorf("the tar arrived as %d bytes with SHA-256 %x; want %d bytes with %x: dropped", p.n, got, p.size, p.sum)
	}
	if err := os.Rename(p.part, p.done); err != nil {
		os.Remove(p.part)
		return err
	}
	s.used.uploads += charge(p.size)
	return nil
}

// Abort keeps what arrived, for a resume.
func (p *Part) Abort() {
	p.f.Close()
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(p.part)
	if fi, err := os.Stat(p.part); err == nil {
		s.used.uploads += charge(fi.Size())
	}
}
