package transfer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// block is the least a file is charged, and the unit its bytes are
// charged in: what a file takes on a disk, whatever its length, so that a
// stranger's thousands of one-byte tars count for what they hold.
const block = 4 << 10

// charge is what a file of n bytes counts for against the stage's bounds.
func charge(n int64) int64 { return max(block, (n+block-1)/block*block) }

// charged is a file being written: what it counts for until it is done,
// the most it may take.
type charged struct {
	bytes  int64
	output bool
	// supersede, for an upload's part, is closed when the same renter
	// resumes the same tar on a new stream: the old one is told to let go.
	supersede chan struct{}
}

// usage is the charge of a set of files: the tars and parts renters
// upload, the outputs leases leave, and the renters' folders (a block
// each).
type usage struct{ uploads, outputs, folders int64 }

func (u usage) total() int64 { return u.uploads + u.outputs + u.folders }

// mkdirLocked makes the renter folder dir and charges it, when it is new:
// what it takes is folder, a block or nothing.
func (s *Stage) mkdirLocked(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	s.used.folders += block
	return nil
}

// folderCharge is what making the renter folder dir would take.
func folderCharge(dir string) int64 {
	if _, err := os.Stat(dir); err == nil {
		return 0
	}
	return block
}

// isOutput reports whether a file of the stage, by name, belongs to a
// lease's output (its tar, SHA-256, refusal or part); the rest are
// uploads, named by their SHA-256.
func isOutput(name string) bool { return strings.Contains(name, ".out") }

func (s *Stage) isBusy(p string) bool {
	_, ok := s.busy[p]
	return ok
}

// release forgets that p is being written, and its charge.
func (s *Stage) release(p string) {
	c, ok := s.busy[p]
	if !ok {
		return
	}
	delete(s.busy, p)
	if c.output {
		s.used.outputs -= c.bytes
	} else {
		s.used.uploads -= c.bytes
	}
}

// held is what one renter keeps: its tars and parts, their charge and
// its outputs' (each output's files together), and how many outputs.
type held struct {
	files            int
	uploads, outputs int64
	outs             int
	lease            map[string][]outputFile // outputs and packs by lease
}

func (h held) bytes() int64 { return h.uploads + h.outputs }

// outputFile is one output a lease keeps: its index and when it was kept.
type outputFile struct {
	index int
	at    time.Time
}

// heldLocked counts what the renter folder dir holds; a file being
// written counts at the most it may take.
func (s *Stage) heldLocked(dir string) held {
	h := held{lease: map[string][]outputFile{}}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n, p := e.Name(), filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || s.isBusy(p) {
			continue
		}
		if !isOutput(n) {
			h.files, h.uploads = h.files+1, h.uploads+charge(fi.Size())
			continue
		}
		h.outputs += charge(fi.Size())
		if lease, index, ok := parseOutput(n); ok && (strings.HasSuffix(n, ".out") || strings.HasSuffix(n, ".out.err")) {
			h.outs++
			h.lease[lease] = append(h.lease[lease], outputFile{index, fi.ModTime()})
		}
	}
	for p, c := range s.busy {
		if filepath.Dir(p) != dir {
			continue
		}
		if !c.output {
			h.files, h.uploads = h.files+1, h.uploads+c.bytes
			continue
		}
		h.outputs += c.bytes
		if lease, index, ok := parseOutput(filepath.Base(p)); ok {
			h.outs++
			h.lease[lease] = append(h.lease[lease], outputFile{index, s.clock.Now()})
		}
	}
	return h
}

// parseOutput reads an output file's name, "<lease>.<index>.out" and what
// follows.
func parseOutput(name string) (lease string, index int, ok bool) {
	i := strings.LastIndex(name, ".out")
	if i < 0 {
		return "", 0, false
	}
	j := strings.LastIndexByte(name[:i], '.')
	if j < 0 {
		return "", 0, false
	}
	index, err := strconv.Atoi(name[j+1 : i])
	return name[:j], index, err == nil && index >= 0
}

// admitLocked checks that renter may keep size more bytes (charged) in
// place of onDisk it keeps already (a part resumed): its own bounds, the
// stage's, and the strangers' when it holds no lease here.
func (s *Stage) admitLocked(renter peer.ID, leased []peer.ID, size, onDisk int64) error {
	dir, err := s.renterDir(renter)
	if err != nil {
		return err
	}
	h := s.heldLocked(dir)
	files, bytes := h.files, h.bytes()-onDisk
	if onDisk > 0 {
		files--
	}
	r := s.rules
	switch {
	case files+1 > r.MaxFiles:
		return fmt.Errorf("this renter keeps %d tars here already; at most %d", files, r.MaxFiles)
	case bytes+size > r.PerRenter:
		return fmt.Errorf("this renter keeps %d bytes here already; with %d more it would pass %d", bytes, size, r.PerRenter)
	case r.Total > 0 && s.used.total()-onDisk+size+folderCharge(dir) > r.Total:
		return fmt.Errorf("this provider keeps %d bytes for all renters already; with %d more it would pass %d (jobs.max_stage_gib)", s.used.total()-onDisk, size+folderCharge(dir), r.Total)
	case r.Strangers > 0 && !slices.Contains(leased, renter):
		if held := s.strangersLocked(leased) - onDisk; held+size > r.Strangers {
			return fmt.Errorf("renters with no lease here keep %d bytes of uploads already; with %d more they would pass %d, half of jobs.max_stage_gib", held, size, r.Strangers)
		}
	}
	return nil
}

// strangersLocked is the charge of the uploads of every renter but those
// leased.
func (s *Stage) strangersLocked(leased []peer.ID) int64 {
	n := s.used.uploads
	seen := map[peer.ID]bool{}
	for _, r := range leased {
		if dir, err := s.renterDir(r); err == nil && !seen[r] {
			seen[r] = true
			n -= s.heldLocked(dir).uploads
		}
	}
	return n
}

// keepOf is how long the file named name is kept since it was written.
func (s *Stage) keepOf(name string) time.Duration {
	if !isOutput(name) {
		return s.rules.Keep
	}
	if _, index, ok := parseOutput(name); ok && s.rules.PacksFrom > 0 && index >= s.rules.PacksFrom {
		return s.rules.Keep
	}
	return OutputKeep
}

// removeLocked removes the file p (not one being written) and its charge.
func (s *Stage) removeLocked(p string) {
	if s.isBusy(p) {
		return
	}
	fi, err := os.Lstat(p)
	if err != nil || os.Remove(p) != nil || !fi.Mode().IsRegular() {
		return
	}
	if isOutput(filepath.Base(p)) {
		s.used.outputs -= charge(fi.Size())
	} else {
		s.used.uploads -= charge(fi.Size())
	}
}

// sweepRenterLocked removes what the renter folder dir keeps no longer,
// as of now.
func (s *Stage) sweepRenterLocked(dir string, now time.Time) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > s.keepOf(e.Name()) {
			s.removeLocked(filepath.Join(dir, e.Name()))
		}
	}
}

// sweepAllLocked counts what the stage holds again, from its files and
// those being written, after it removed what it keeps no longer (when
// remove) and the renter folders left empty.
func (s *Stage) sweepAllLocked(remove bool) {
	now := s.clock.Now()
	var u usage
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.dir, e.Name())
		u.folders += block
		files, _ := os.ReadDir(dir)
		left := 0
		for _, f := range files {
			p := filepath.Join(dir, f.Name())
			fi, err := f.Info()
			if err != nil || s.isBusy(p) {
				left++
				continue
			}
			if remove && now.Sub(fi.ModTime()) > s.keepOf(f.Name()) && os.Remove(p) == nil {
				continue
			}
			left++
			if !fi.Mode().IsRegular() {
				continue
			}
			if isOutput(f.Name()) {
				u.outputs += charge(fi.Size())
			} else {
				u.uploads += charge(fi.Size())
			}
		}
		if left == 0 && remove && !s.busyIn(dir) && os.Remove(dir) == nil {
			u.folders -= block
		}
	}
	for _, c := range s.busy {
		if c.output {
			u.outputs += c.bytes
		} else {
			u.uploads += c.bytes
		}
	}
	s.used = u
}

// busyIn reports whether a file in dir is being written.
func (s *Stage) busyIn(dir string) bool {
	for p := range s.busy {
		if filepath.Dir(p) == dir {
			return true
		}
	}
	return false
}
