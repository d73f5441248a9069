package attest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func signedDoc(t testing.TB, key crypto.PrivKey, at time.Time, uuids ...string) []byte {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	d := &pb.Document{Version: DocumentVersion, Issuer: []byte(id), Nonce: make([]byte, NonceSize), CreatedUnixMs: at.UnixMilli()}
	for _, u := range uuids {
		d.Gpus = append(d.Gpus, &pb.GPUFingerprint{Uuid: u, Name: "NVIDIA H100 80GB HBM3"})
	}
	env, err := SignDocument(key, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestVerifyEvidence(t *testing.T) {
	alice, aliceID := keyOf(t)
	bob, bobID := keyOf(t)
	now := time.Now()
	ev := func(a, b []byte) []byte {
		data, err := NewEvidence(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	// Two peers attest one UUID: both are named.
	got, err := VerifyEvidence(ev(signedDoc(t, alice, now, "GPU-1", "GPU-2"), signedDoc(t, bob, now, "GPU-2")))
	if err != nil || len(got) != 2 || !slices.Contains(got, aliceID) || !slices.Contains(got, bobID) {
		t.Errorf("double-claimed UUID: %v, %v", got, err)
	}
	// One peer signs different GPU sets within a minute: that peer.
	got, err = VerifyEvidence(ev(signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now.Add(30*time.Second), "GPU-1", "GPU-9")))
	if err != nil || len(got) != 1 || got[0] != aliceID {
		t.Errorf("conflicting documents: %v, %v", got, err)
	}

	// What proves nothing is refused.
	bad := append([]byte(nil), signedDoc(t, bob, now, "GPU-1")...)
	bad[len(bad)-3] ^= 1
	for name, data := range map[string][]byte{
		"different GPUs of two peers": ev(signedDoc(t, alice, now, "GPU-1"), signedDoc(t, bob, now, "GPU-2")),
		"a change an hour apart":      ev(signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now.Add(time.Hour), "GPU-2")),
		"the same document twice":     ev(signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now, "GPU-1")),
		"a forged document":           ev(signedDoc(t, alice, now, "GPU-1"), bad),
		"garbage":                     []byte("not evidence"),
		"too large":                   make([]byte, MaxEvidenceSize+1),
	} {
		if offenders, err := VerifyEvidence(data); err == nil || !(errors.Is(err, ErrNoEvidence) || errors.Is(err, ErrDocSignature) || errors.Is(err, ErrDocSigner)) {
			t.Errorf("%s: offenders %v, err %v", name, offenders, err)
		}
	}
}

func FuzzVerifyEvidence(f *testing.F) {
	alice, _, _ := crypto.GenerateEd25519Key(nil)
	bob, _, _ := crypto.GenerateEd25519Key(nil)
	now := time.Unix(1_800_000_000, 0)
	seed, _ := NewEvidence(signedDoc(f, alice, now, "GPU-1"), signedDoc(f, bob, now, "GPU-1"))
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		offenders, err := VerifyEvidence(data)
		if err == nil && (len(offenders) == 0 || len(offenders) > 2) {
			t.Fatalf("evidence with %d offenders", len(offenders))
		}
	})
}
