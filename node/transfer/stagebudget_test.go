package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// freshID is a new key's peer ID: what a stranger gets for nothing.
func freshID(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// onDisk is what the files and folders under dir hold: their bytes,
// each rounded up to whole 4 KiB blocks as the stage charges them, and
// the blocks the file system gave them.
func onDisk(t testing.TB, dir string) (charged, allocated int64) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if d.IsDir() {
			charged += 4096
		} else {
			charged += max(4096, (fi.Size()+4095)/4096*4096)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			allocated += st.Blocks * 512
		}
		return nil
	})
	return charged, allocated
}

// Issue 26, attack 1, in the stage: a lease ID that climbs out of the
// asker's folder names nothing, and no output of another renter's is
// read or written through it.
func TestAStageKeepsEachRenterInItsOwnFolder(t *testing.T) {
	stage, err := transfer.NewStage(t.TempDir(), transfer.StageRules{MaxBytes: 1 << 20, PerRenter: 4 << 20, MaxFiles: 8, Keep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	victim, attacker := freshID(t), freshID(t)
	secret := []byte("the victim's results")
	if err := stage.PutOutput(victim, "lease-v", 0, bytes.NewReader(secret)); err != nil {
		t.Fatal(err)
	}
	for _, lease := range []string{"../" + victim.String() + "/lease-v", "./../" + victim.String() + "/lease-v", "lease-v", "..", ".", "", "a/b", "lease\x00", strings.Repeat("l", 65)} {
		if f, _, _, err := stage.Output(attacker, lease, 0); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("the attacker opened lease %q and read %q", lease, b)
		}
		r := strings.NewReader("the attacker's bytes")
		if err := stage.PutOutput(attacker, lease, 0, r); lease != "lease-v" && err == nil || r.Len() != 0 {
			t.Errorf("the attacker kept an output as lease %q: %v, %d bytes unread", lease, err, r.Len())
		}
	}
	f, _, _, err := stage.Output(victim, "lease-v", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); !bytes.Equal(b, secret) {
		t.Errorf("the victim's own output reads %q, want %q", b, secret)
	}
}

// Issue 26, attack 6: 40 keys staged 1.28 GB in 6 s with no lease. Fresh
// keys, each within its own share, upload over real hosts until the
// stage refuses: the renters with no lease here stop at their half of
// the stage, renters with a lease here then take the rest until the
// whole stage refuses, and the stage's files never hold more than its
// bound, while it fills or after.
func TestManyFreshKeysCannotFillTheStage(t *testing.T) {
	const (
		tar      = 1 << 20
		total    = 24 << 20
		keys     = 40
		leasedBy = 8
	)
	var leased []peer.ID
	var mu sync.Mutex
	rules := transfer.StageRules{MaxBytes: tar, PerRenter: 2 * tar, MaxFiles: 8, Keep: time.Hour,
		Total: total, Strangers: total / 2, Leased: func() []peer.ID { mu.Lock(); defer mu.Unlock(); return leased }}
	_, provider, stage := stagePair(t, rules)
	dir := stageDirOf(t, stage)

	// A watcher walks the stage while it fills: the most it ever saw.
	var most int64
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if c, _ := onDisk(t, dir); c > most {
				most = c
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	// upload sends n tars of tar bytes from a fresh host: what it tried,
	// what the stage kept, and the refusals' reasons.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		tried, kept int64
		refusals    []string
	}
	upload := func(n int, lease bool) result {
		h := loopbackHost(t)
		defer h.Close() // the provider's connection manager keeps 20
		if lease {
			mu.Lock()
			leased = append(leased, h.ID())
			mu.Unlock()
		}
		if err := h.Connect(ctx, peer.AddrInfo{ID: provider.ID(), Addrs: provider.Addrs()}); err != nil {
			t.Error(err)
			return result{}
		}
		var r result
		for i := range n {
			data := make([]byte, tar)
			rand.New(rand.NewSource(int64(i))).Read(data)
			copy(data, h.ID())
			sum := sha256.Sum256(data)
			r.tried += tar
			_, err := p2p.Upload(ctx, h, p2p.Swarm{Name: "test"}, provider.ID(), sum[:], tar, func(off int64) (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(data[off:])), nil
			})
			var refused *p2p.UploadRefusedError
			switch {
			case errors.As(err, &refused):
				r.refusals = append(r.refusals, refused.Reason)
			case err != nil:
				t.Errorf("an upload failed, not refused: %v", err)
			default:
				r.kept += tar
			}
		}
		return r
	}
	gather := func(n int, lease bool) (tried, kept int64, refusals []string) {
		results, running := make(chan result, n), make(chan struct{}, 8)
		for range n {
			go func() {
				running <- struct{}{}
				defer func() { <-running }()
				results <- upload(2, lease)
			}()
		}
		for range n {
			r := <-results
			tried, kept, refusals = tried+r.tried, kept+r.kept, append(refusals, r.refusals...)
		}
		return tried, kept, refusals
	}

	tried, kept, refusals := gather(keys, false)
	t.Logf("%d fresh keys with no lease tried %d bytes, the stage kept %d (its half for them: %d)", keys, tried, kept, int64(total/2))
	if kept > total/2 || len(refusals) == 0 {
		t.Errorf("renters with no lease kept %d bytes of %d tried, %d refusals; want at most %d", kept, tried, len(refusals), total/2)
	}
	for _, why := range refusals {
		if !strings.Contains(why, "renters with no lease here keep") {
			t.Errorf("a stranger's refusal: %q; want the strangers' bound named", why)
			break
		}
	}
	ltried, lkept, lrefusals := gather(leasedBy, true)
	t.Logf("%d keys with a lease tried %d bytes, the stage kept %d", leasedBy, ltried, lkept)
	if lkept == 0 || len(lrefusals) == 0 || !strings.Contains(lrefusals[0], "jobs.max_stage_gib") {
		t.Errorf("renters with a lease kept %d bytes, refused %q; want some kept, then the stage's bound named", lkept, lrefusals)
	}
	close(stop)
	<-watched
	charged, allocated := onDisk(t, dir)
	t.Logf("under %d keys: %d bytes tried, %d kept; the stage's files: %d bytes charged, %d allocated, at most %d seen while it filled; bound %d",
		keys+leasedBy, tried+ltried, kept+lkept, charged, allocated, most, int64(total))
	if charged > total || most > total || stage.Used() > total {
		t.Errorf("the stage's files hold %d bytes (%d at most while it filled; it counts %d), past its bound of %d", charged, most, stage.Used(), int64(total))
	}
}

// stageDirOf is where stage keeps its files: the folder above the one of
// a tar it holds.
func stageDirOf(t testing.TB, stage *transfer.Stage) string {
	t.Helper()
	id := freshID(t)
	data := []byte("a probe")
	sum := sha256.Sum256(data)
	_, part, err := stage.Begin(id, sum[:], int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	part.Write(data)
	if err := part.Finish(); err != nil {
		t.Fatal(err)
	}
	st, err := stage.Get(id, sum[:], int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	stage.Remove(id, sum[:])
	return filepath.Dir(filepath.Dir(st.Path))
}

// Staged tars and parts, and packs, are freed Keep after they were last
// written, outputs OutputKeep after they were kept, by the stage's clock:
// the renter that left them never comes back, and its folder goes too.
func TestAStaleUploadIsFreedOnTheClock(t *testing.T) {
	clk := clock.NewFake()
	dir := filepath.Join(t.TempDir(), "staging")
	stage, err := transfer.NewStage(dir, transfer.StageRules{MaxBytes: 1 << 20, PerRenter: 4 << 20, MaxFiles: 8, Keep: time.Hour, PacksFrom: 8, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stage.Start(ctx)
	defer stage.Close()

	renter := freshID(t)
	whole, half := []byte("a whole tar"), []byte("half of a tar")
	wsum, hsum := sha256.Sum256(whole), sha256.Sum256(half)
	_, part, err := stage.Begin(renter, wsum[:], int64(len(whole)))
	if err != nil {
		t.Fatal(err)
	}
	part.Write(whole)
	if err := part.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, part, err = stage.Begin(renter, hsum[:], int64(len(half))); err != nil {
		t.Fatal(err)
	}
	part.Write(half[:4])
	part.Abort()
	if err := stage.PutOutput(renter, "lease-1", 0, strings.NewReader("an output")); err != nil {
		t.Fatal(err)
	}
	if err := stage.PutOutput(renter, "lease-1", 8, strings.NewReader("a pack")); err != nil {
		t.Fatal(err)
	}
	files := func() []string {
		ents, _ := os.ReadDir(filepath.Join(dir, renter.String()))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	if n := len(files()); n != 6 {
		t.Fatalf("the stage holds %v; want a tar, a part, two outputs and their sums", files())
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s; the stage holds %v", what, files())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	clk.Advance(time.Hour + transfer.SweepEvery)
	waitUntil("the tar, the part and the pack are still there an hour on", func() bool {
		f := files()
		return len(f) == 2 && strings.HasPrefix(f[0], "lease-1.0.out")
	})
	clk.Advance(transfer.OutputKeep)
	waitUntil("the output is still there a day on", func() bool {
		_, err := os.Stat(filepath.Join(dir, renter.String()))
		return errors.Is(err, fs.ErrNotExist)
	})
	if u := stage.Used(); u != 0 {
		t.Errorf("the empty stage counts %d bytes", u)
	}
}

// Issue 26, attack 13: one lease packed 31 outputs of about 15 MiB, kept
// for a day outside the renter's share. Outputs count against the
// renter's share and the stage's: a lease's workload outputs stop at what
// the renter's share leaves (the refusal says so), and its packs, however
// many, keep at most MaxPacksPerLease, the oldest making room.
func TestALeasesOutputsStayWithinTheRentersShare(t *testing.T) {
	const out = 3 << 20
	dir := filepath.Join(t.TempDir(), "staging")
	rules := transfer.StageRules{MaxBytes: 4 << 20, PerRenter: 8 << 20, MaxFiles: 8, Keep: time.Hour, Total: 64 << 20, PacksFrom: 8}
	stage, err := transfer.NewStage(dir, rules)
	if err != nil {
		t.Fatal(err)
	}
	renter := freshID(t)
	blob := make([]byte, out)
	var kept int
	for i := range 31 {
		if err := stage.PutOutput(renter, "lease-1", 8+i, bytes.NewReader(blob)); err != nil {
			t.Errorf("pack %d: %v", i, err)
			continue
		}
		kept++
		if c, _ := onDisk(t, filepath.Join(dir, renter.String())); c > rules.PerRenter {
			t.Fatalf("after pack %d the renter keeps %d bytes, past its %d", i, c, rules.PerRenter)
		}
	}
	packs, _ := filepath.Glob(filepath.Join(dir, renter.String(), "*.out"))
	if len(packs) > transfer.MaxPacksPerLease || kept != 31 {
		t.Errorf("31 packs of one lease: %d taken, %d kept at once; want each taken and at most %d kept", kept, len(packs), transfer.MaxPacksPerLease)
	}

	// Workload outputs are not made room for: the third does not fit.
	other := freshID(t)
	var refusal error
	for i := range 8 {
		if err := stage.PutOutput(other, "lease-2", i, bytes.NewReader(blob)); err != nil {
			refusal = err
			break
		}
	}
	if refusal == nil || !strings.Contains(refusal.Error(), "this renter's 8388608 bytes") {
		t.Errorf("8 outputs of 3 MiB in a share of 8 MiB: %v; want a refusal naming the share", refusal)
	}
	if c, _ := onDisk(t, filepath.Join(dir, other.String())); c > rules.PerRenter {
		t.Errorf("the renter keeps %d bytes of outputs, past its %d", c, rules.PerRenter)
	}
	if _, _, _, err := stage.Output(other, "lease-2", 2); err == nil || !strings.Contains(err.Error(), "not kept") {
		t.Errorf("the download of the output not kept: %v; want why", err)
	}
	// Uploads and outputs share the renter's bytes.
	data := make([]byte, 4<<20)
	sum := sha256.Sum256(data)
	if _, _, err := stage.Begin(other, sum[:], int64(len(data))); err == nil || !strings.Contains(err.Error(), "this renter keeps") {
		t.Errorf("an upload past what the renter's outputs left: %v", err)
	}
}

// A renter that resumes a tar on a new stream while its old one still
// holds the part (a killed renter's QUIC connection is not known dead
// until its idle timeout) tells the old stream to let go, and takes the
// part over; nobody else's stream can.
func TestAResumedUploadTakesThePartFromTheStreamItResumes(t *testing.T) {
	stage, err := transfer.NewStage(t.TempDir(), transfer.StageRules{MaxBytes: 1 << 20, PerRenter: 4 << 20, MaxFiles: 8, Keep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	renter, _ := peer.Decode("12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo")
	data := bytes.Repeat([]byte("x"), 4096)
	sum := sha256.Sum256(data)
	_, old, err := stage.Begin(renter, sum[:], int64(len(data)))
	if err != nil || old == nil {
		t.Fatalf("the first stream's part: %v", err)
	}
	old.Write(data[:1000])
	// The old stream lets go once told to, as p2p.ServeUploads does.
	go func() {
		<-old.Superseded()
		old.Abort()
	}()
	t0 := time.Now()
	have, part, err := stage.Begin(renter, sum[:], int64(len(data)))
	if err != nil || part == nil {
		t.Fatalf("the resuming stream: %v (after %s)", err, time.Since(t0).Round(time.Millisecond))
	}
	if have != 1000 {
		t.Errorf("resumed from byte %d, want 1000", have)
	}
	part.Write(data[have:])
	if err := part.Finish(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-part.Superseded():
		t.Error("the part that finished was told to let go")
	default:
	}
}
