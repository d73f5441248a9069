package attest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

var leaseStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// beats signs n beats of a lease, one every 10 s from leaseStart+10s.
func beats(t testing.TB, key crypto.PrivKey, lease string, n int) [][]byte {
	t.Helper()
	c, err := NewChain(key, "", lease)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, n)
	for i := range out {
		sample := []*pb.GPUSample{{Uuid: "GPU-1", UtilizationPct: 97, MemoryUsedBytes: 70 << 30, TemperatureC: 71, PowerMilliwatts: 650_000}}
		if out[i], err = c.Next(leaseStart.Add(time.Duration(i+1)*10*time.Second), sample); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func keyOf(t testing.TB) (crypto.PrivKey, peer.ID) {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

func TestTelemetryChain(t *testing.T) {
	key, id := keyOf(t)
	forger, _ := keyOf(t)
	good := beats(t, key, "lease-1", 10)
	end := leaseStart.Add(100 * time.Second)
	verify := func(envs [][]byte) ChainReport {
		return VerifyChain(envs, id, "", "lease-1", leaseStart, end, 10*time.Second)
	}

	r := verify(good)
	if r.Valid != 10 || r.Coverage != 1 || len(r.Gaps) != 0 || len(r.Problems) != 0 || len(r.Root) != 32 {
		t.Fatalf("a whole chain: %+v", r)
	}

	dropped := append(append([][]byte{}, good[:4]...), good[5:]...)
	r = verify(dropped)
	if r.Valid != 9 || len(r.Gaps) != 1 || !r.Gaps[0].From.Equal(leaseStart.Add(40*time.Second)) || r.Coverage != 0.9 ||
		len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "1 beats missing") {
		t.Errorf("a dropped beat: %+v", r)
	}

	reordered := append([][]byte{}, good...)
	reordered[6], reordered[7] = reordered[7], reordered[6]
	r = verify(reordered)
	if len(r.Problems) != 2 || !strings.Contains(r.Problems[0], "missing") || !strings.Contains(r.Problems[1], "out of order") {
		t.Errorf("a reordered beat: %+v", r.Problems)
	}

	forged := append([][]byte{}, good...)
	forged[3] = beats(t, forger, "lease-1", 4)[3]
	r = verify(forged)
	if r.Valid != 9 || !strings.Contains(strings.Join(r.Problems, ";"), "beat 3: signed by another peer") {
		t.Errorf("a forged beat: %+v", r.Problems)
	}

	flipped := append([][]byte{}, good...)
	flipped[2] = append([]byte(nil), good[2]...)
	flipped[2][len(flipped[2])-5] ^= 1
	r = verify(flipped)
	if r.Valid != 9 || !strings.Contains(strings.Join(r.Problems, ";"), "beat 2: bad signature") {
		t.Errorf("a changed byte: %+v", r.Problems)
	}

	other := beats(t, key, "lease-2", 1)
	if r := verify(other); r.Valid != 0 || !strings.Contains(r.Problems[0], "lease") {
		t.Errorf("another lease's beat: %+v", r.Problems)
	}
	if r := verify(nil); r.Coverage != 0 || len(r.Gaps) != 1 {
		t.Errorf("no beats: %+v", r)
	}
}

// BenchmarkVerifyChain reports beats verified per second on one core
// beside raw Ed25519 verifications of messages of the same length.
//
//	go test ./attest -run '^$' -bench VerifyChain -benchtime 2000x
func BenchmarkVerifyChain(b *testing.B) {
	key, id := keyOf(b)
	const n = 500
	chain := beats(b, key, "lease-1", n)
	raw, _ := key.Raw()
	priv := ed25519.PrivateKey(raw)
	msg := make([]byte, len(chain[0]))
	sig := ed25519.Sign(priv, msg)
	pub := priv.Public().(ed25519.PublicKey)
	end := leaseStart.Add(n * 10 * time.Second)
	var verifyTime, rawTime time.Duration
	beatsDone := 0
	for b.Loop() {
		t0 := time.Now()
		r := VerifyChain(chain, id, "", "lease-1", leaseStart, end, 10*time.Second)
		t1 := time.Now()
		for range n {
			ed25519.Verify(pub, msg, sig)
		}
		t2 := time.Now()
		if r.Valid != n {
			b.Fatalf("valid %d", r.Valid)
		}
		verifyTime, rawTime, beatsDone = verifyTime+t1.Sub(t0), rawTime+t2.Sub(t1), beatsDone+n
	}
	beatsPerSec := float64(beatsDone) / verifyTime.Seconds()
	rawPerSec := float64(beatsDone) / rawTime.Seconds()
	b.ReportMetric(beatsPerSec, "beats/s")
	b.ReportMetric(rawPerSec, "ed25519-verifies/s")
	b.ReportMetric(beatsPerSec/rawPerSec, "beats/raw")
}

func FuzzVerifyChain(f *testing.F) {
	key, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(key)
	for _, env := range beats(f, key, "lease-1", 2) {
		f.Add(env)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := VerifyChain([][]byte{data}, id, "", "lease-1", leaseStart, leaseStart.Add(time.Minute), 10*time.Second)
		// One beat is valid, refused, or valid with a missing-seq problem.
		if r.Valid > 1 || len(r.Problems) > 1 || r.Valid+len(r.Problems) == 0 || r.Coverage < 0 || r.Coverage > 1 {
			t.Fatalf("report %+v", r)
		}
	})
}

func TestFollower(t *testing.T) {
	key, id := newKey(t)
	otherKey, _ := newKey(t)
	c, _ := NewChain(key, "", "lease-1")
	forger, _ := NewChain(otherKey, "", "lease-1")
	start := time.Now()
	var beats [][]byte
	for i := range 4 {
		env, err := c.Next(start.Add(time.Duration(i)*time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		beats = append(beats, env)
	}
	f := NewFollower(id, "", "lease-1", Term{})
	resumed, _ := ResumeChain(key, "", "lease-1", c.Beats(), c.Root(), c.Last())
	fifth, _ := resumed.Next(start.Add(4*time.Second), nil)
	relinked, _ := ResumeChain(key, "", "lease-1", 1, []byte("not beat 1's hash"), start)
	badLink, _ := relinked.Next(start.Add(time.Second), nil)
	forged, _ := forger.Next(start, nil)
	if err := f.Add(forged); err == nil {
		t.Error("a forged beat was accepted")
	}
	elsewhere, _ := NewChain(key, "lab", "lease-1")
	if beat, _ := elsewhere.Next(start, nil); f.Add(beat) == nil {
		t.Error("a beat of the lease signed for another swarm was accepted")
	}
	if err := f.Add(beats[0]); err != nil {
		t.Fatal(err)
	}
	if err := f.Add(badLink); err == nil {
		t.Error("a next beat that does not link to the last was accepted")
	}
	// Beat 2 goes missing; 3 is accepted, counted after a gap; replays of
	// 1 and 2 change nothing.
	for _, b := range [][]byte{beats[2], beats[0], beats[1], beats[3]} {
		if err := f.Add(b); err != nil {
			t.Fatalf("beats with a gap and replays: %v", err)
		}
	}
	if f.Missing() != 1 {
		t.Errorf("%d beats missing, want 1", f.Missing())
	}
	if err := f.Add(fifth); err != nil {
		t.Fatalf("a beat of the chain resumed after a restart: %v", err)
	}
	if f.Beats() != 5 || !bytes.Equal(f.Root(), resumed.Root()) || !f.Last().Equal(resumed.Last()) {
		t.Errorf("follower: %d beats, root %x, last %s; chain: root %x, last %s", f.Beats(), f.Root(), f.Last(), resumed.Root(), resumed.Last())
	}
}

// A follower takes a beat only when it is stamped within the lease's term,
// no further ahead of its clock than the skew allows, and no earlier than
// the beat before: a lease is metered to its last verified beat, so a
// beat stamped ahead would bill time not yet served.
func TestFollowerRefusesBeatsStampedOutOfTime(t *testing.T) {
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	id, _ := peer.IDFromPrivateKey(key)
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Minute)
	term := Term{Start: start, End: start.Add(time.Hour), Now: func() time.Time { return now }, Skew: 30 * time.Second}
	beatAt := func(seq uint64, at time.Time) []byte {
		t.Helper()
		c, err := ResumeChain(key, "", "lease-1", seq-1, nil, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		env, err := c.Next(at, nil)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	for _, tc := range []struct {
		name string
		at   time.Time
	}{
		{"before the start", start.Add(-31 * time.Second)},
		{"after the end", start.Add(time.Hour + 31*time.Second)},
		{"ahead of the clock", now.Add(31 * time.Second)},
		{"at the end, 50 minutes early", start.Add(time.Hour)},
	} {
		f := NewFollower(id, "", "lease-1", term)
		err := f.Add(beatAt(1, tc.at))
		if !errors.Is(err, ErrBeatTime) {
			t.Errorf("%s: %v, want ErrBeatTime", tc.name, err)
		}
		if f.Beats() != 0 || !f.Last().IsZero() {
			t.Errorf("%s: the beat was counted (%d beats, last %s)", tc.name, f.Beats(), f.Last())
		}
	}
	// Within the skew at either edge, and in order: accepted.
	f := NewFollower(id, "", "lease-1", term)
	c, _ := NewChain(key, "", "lease-1")
	for _, at := range []time.Time{start.Add(-29 * time.Second), now.Add(29 * time.Second)} {
		env, _ := c.Next(at, nil)
		if err := f.Add(env); err != nil {
			t.Fatalf("beat %d at %s: %v", c.Beats(), at, err)
		}
	}
	// Earlier than the beat before (after a gap, so unlinked): refused.
	if err := f.Add(beatAt(4, now)); !errors.Is(err, ErrBeatTime) {
		t.Errorf("a beat stamped before the one it follows: %v, want ErrBeatTime", err)
	}
	// A resumed follower checks the same term.
	r := ResumeFollower(id, "", "lease-1", term, f.Beats(), f.Root(), f.Last())
	if err := r.Add(beatAt(4, start.Add(2*time.Hour))); !errors.Is(err, ErrBeatTime) {
		t.Errorf("resumed: a beat after the end: %v, want ErrBeatTime", err)
	}
	if r.Beats() != 2 {
		t.Errorf("resumed: %d beats, want 2", r.Beats())
	}
}
