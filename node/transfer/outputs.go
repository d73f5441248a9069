package transfer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// OutputKeep is how long a lease's packed outputs wait for its renter
// (idlegrid cp's packs wait StageRules.Keep). MaxOutputsKept bounds how
// many one renter has kept at once, MaxOutputsPerLease how many of them
// one lease keeps, and MaxPacksPerLease how many of those are idlegrid
// cp's packs. Their bytes count against the renter's and the stage's.
const (
	OutputKeep         = 24 * time.Hour
	MaxOutputsKept     = 32
	MaxOutputsPerLease = 16
	MaxPacksPerLease   = 4
)

// CheckLeaseID refuses a lease ID that could not be a lease's: one that
// is not 1-64 of A-Z a-z 0-9 . _ : -, or dots alone. No path a lease ID
// names leaves the folder it is in.
func CheckLeaseID(id string) error {
	ok := len(id) >= 1 && len(id) <= 64 && strings.Trim(id, ".") != ""
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return fmt.Errorf("lease ID %.80q: want 1-64 of A-Z a-z 0-9 . _ : -, not dots alone", id)
	}
	return nil
}

// outputPath is the tar of renter's output index of lease, in the
// renter's folder and nowhere else.
func (s *Stage) outputPath(renter peer.ID, lease string, index int) (string, error) {
	if err := CheckLeaseID(lease); err != nil {
		return "", err
	}
	if index < 0 {
		return "", fmt.Errorf("output index %d: want 0 or more", index)
	}
	dir, err := s.renterDir(renter)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, fmt.Sprintf("%s.%d.out", lease, index))
	if filepath.Dir(p) != dir {
		return "", fmt.Errorf("lease ID %q: names a path outside this renter's folder", lease)
	}
	return p, nil
}

// PutOutput keeps the tar r carries, renter's output index of lease, for
// it to download: at most MaxBytes, and no more than the renter's and the
// stage's bounds leave room for, hashed as it arrives. A tar cut short
// (r's error) or too large is not kept, and why is kept in its place;
// r is read to its end either way, for the packer to finish.
func (s *Stage) PutOutput(renter peer.ID, lease string, index int, r io.Reader) error {
	p, err := s.outputPath(renter, lease, index)
	var limit int64
	var bound string
	if err == nil {
		limit, bound, err = s.reserveOutput(p, lease, index)
	}
	if err != nil {
		io.Copy(io.Discard, r)
		return err
	}
	sum, err := writeOutput(p+".part", r, limit)
	if errors.Is(err, errTooLarge) {
		err = fmt.Errorf("output %d of lease %s: more than %d bytes %s: not kept", index, lease, limit, bound)
		io.Copy(io.Discard, r)
	}
	// Kept or refused under the lock, so that a sweep counts each file
	// once.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(p + ".part")
	if err == nil {
		if err = os.WriteFile(p+".sha256", sum, 0o600); err == nil {
			err = os.Rename(p+".part", p)
		}
	}
	if err != nil {
		os.Remove(p + ".part")
		os.Remove(p + ".sha256")
		why := err.Error()
		os.WriteFile(p+".err", []byte(why[:min(len(why), block)]), 0o600)
		s.count(p + ".err")
		return err
	}
	s.count(p)
	s.count(p + ".sha256")
	return nil
}

var errTooLarge = errors.New("too large")

// writeOutput writes r to part, at most limit bytes, and returns its
// SHA-256.
func writeOutput(part string, r io.Reader, limit int64) ([]byte, error) {
	f, err := os.Create(part)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = errTooLarge
	}
	return h.Sum(nil), err
}

// count charges the file p, written.
func (s *Stage) count(p string) {
	if fi, err := os.Stat(p); err == nil {
		s.used.outputs += charge(fi.Size())
	}
}

// reserveOutput makes room for output index of lease at p: it replaces an
// output kept under its name, makes room for a pack by removing the
// lease's oldest packs (for MaxPacksPerLease, and for MaxBytes), checks the renter's and the lease's counts, and charges the
// most the output may take (and its SHA-256), which it returns with the
// bound that sets it.
func (s *Stage) reserveOutput(p, lease string, index int) (limit int64, bound string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isBusy(p + ".part") {
		return 0, "", fmt.Errorf("output %d of lease %s is being kept already", index, lease)
	}
	s.removeOutputLocked(p)
	dir := filepath.Dir(p)
	h := s.heldLocked(dir)
	if s.isPack(index) {
		var packs []outputFile
		for _, o := range h.lease[lease] {
			if s.isPack(o.index) {
				packs = append(packs, o)
			}
		}
		slices.SortFunc(packs, func(a, b outputFile) int { return a.at.Compare(b.at) })
		// Its renter took the older ones at once (idlegrid cp).
		for len(packs) > 0 && (len(packs) >= MaxPacksPerLease || s.rules.PerRenter-h.bytes()-block < s.rules.MaxBytes) {
			s.removeOutputLocked(filepath.Join(dir, fmt.Sprintf("%s.%d.out", lease, packs[0].index)))
			packs = packs[1:]
			h = s.heldLocked(dir)
		}
	}
	r := s.rules
	switch {
	case h.outs >= MaxOutputsKept:
		return 0, "", fmt.Errorf("this renter has %d outputs kept here already, at most %d, for %s each", h.outs, MaxOutputsKept, OutputKeep)
	case len(h.lease[lease]) >= MaxOutputsPerLease:
		return 0, "", fmt.Errorf("lease %s has %d outputs kept here already, at most %d", lease, len(h.lease[lease]), MaxOutputsPerLease)
	}
	// The room left is in whole blocks, one kept for the SHA-256.
	limit, bound = r.MaxBytes, "(jobs.max_upload_mib)"
	if room := (r.PerRenter - h.bytes() - block) / block * block; room < limit {
		limit, bound = room, fmt.Sprintf("(what is left of this renter's %d bytes here)", r.PerRenter)
	}
	if room := (r.Total - s.used.total() - folderCharge(dir) - block) / block * block; r.Total > 0 && room < limit {
		limit, bound = room, fmt.Sprintf("(what is left of this provider's %d bytes for all renters, jobs.max_stage_gib)", r.Total)
	}
	if limit <= 0 {
		return 0, "", fmt.Errorf("output %d of lease %s: no room %s: not kept", index, lease, bound)
	}
	if err := s.mkdirLocked(dir); err != nil {
		return 0, "", err
	}
	s.busy[p+".part"] = charged{bytes: charge(limit) + block, output: true}
	s.used.outputs += charge(limit) + block
	return limit, bound, nil
}

func (s *Stage) isPack(index int) bool { return s.rules.PacksFrom > 0 && index >= s.rules.PacksFrom }

// removeOutputLocked removes the output at p, its SHA-256 and refusal.
func (s *Stage) removeOutputLocked(p string) {
	for _, q := range []string{p, p + ".sha256", p + ".err"} {
		s.removeLocked(q)
	}
}

// Output opens renter's output index of lease: the tar, its size and its
// SHA-256, or why it was not kept. It looks in the renter's folder alone.
func (s *Stage) Output(renter peer.ID, lease string, index int) (f *os.File, size int64, sum []byte, err error) {
	p, err := s.outputPath(renter, lease, index)
	if err != nil {
		return nil, 0, nil, err
	}
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
