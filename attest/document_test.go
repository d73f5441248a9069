//go:build cgo

package attest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	marketpb "github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

func nonce(t *testing.T) []byte {
	n := make([]byte, NonceSize)
	rand.Read(n)
	return n
}

// challenge is a fresh nonce from a fresh challenger.
func challenge(t *testing.T) Challenge {
	_, id := newKey(t)
	return Challenge{Challenger: id, Nonce: nonce(t)}
}

func fakeInventory(t *testing.T, machine string) Inventory {
	t.Helper()
	f, err := NewFake(machine)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := f.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestDocumentRoundTripAndTampering(t *testing.T) {
	key, id := newKey(t)
	otherKey, other := newKey(t)
	inv := fakeInventory(t, "dgxh100")
	now := time.Now()
	n := challenge(t)
	d := NewDocument(inv, id, n, now, []string{"gpus"})
	env, err := SignDocument(key, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyDocument(env, id, n, now.Add(time.Second), time.Minute)
	if err != nil || len(got.Gpus) != 8 || got.Gpus[0].Uuid != inv.GPUs[0].UUID {
		t.Fatalf("round trip: %v", err)
	}
	if string(got.Gpus[0].SerialHash) == inv.GPUs[0].Serial || len(got.Gpus[0].SerialHash) != 32 {
		t.Error("the serial is not hashed")
	}
	if string(SerialHash("S1", id)) == string(SerialHash("S1", other)) {
		t.Error("serial hash does not depend on the issuer")
	}

	// A changed UUID inside the signed bytes: the signature no longer holds.
	tampered := append([]byte(nil), env...)
	at := bytes.Index(tampered, []byte(inv.GPUs[3].UUID))
	if at < 0 {
		t.Fatal("UUID not found in the envelope")
	}
	tampered[at+5] ^= 0x01
	cases := []struct {
		name string
		env  []byte
		want peer.ID
		ch   Challenge
		at   time.Time
		err  error
	}{
		{"changed bytes", tampered, id, n, now, ErrDocSignature},
		{"replayed nonce", env, id, Challenge{Challenger: n.Challenger, Nonce: nonce(t)}, now, ErrDocNonce},
		{"shown to another challenger", env, id, Challenge{Challenger: other, Nonce: n.Nonce}, now, ErrDocChallenger},
		{"shown in another swarm", env, id, Challenge{Swarm: "lab", Challenger: n.Challenger, Nonce: n.Nonce}, now, ErrDocSwarm},
		{"stale", env, id, n, now.Add(2 * time.Minute), ErrDocStale},
		{"from the future", env, id, n, now.Add(-2 * time.Minute), ErrDocStale},
		{"wrong signer", env, other, n, now, ErrDocSigner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := VerifyDocument(tc.env, tc.want, tc.ch, tc.at, time.Minute); !errors.Is(err, tc.err) {
				t.Errorf("got %v, want %v", err, tc.err)
			}
		})
	}
	if _, err := SignDocument(otherKey, d); !errors.Is(err, ErrDocSigner) {
		t.Errorf("another key signed the document: %v", err)
	}
	if len(DocumentHash(env)) != 32 {
		t.Error("document hash is not SHA-256")
	}
}

func TestCheckOfferAndChanges(t *testing.T) {
	_, id := newKey(t)
	inv := fakeInventory(t, "dgxh100")
	d := NewDocument(inv, id, challenge(t), time.Now(), nil)
	offer := func(model string, count uint32, vramGiB uint64) *marketpb.Offer {
		return &marketpb.Offer{Gpus: []*marketpb.GPUGroup{{Model: model, Count: count, VramBytes: vramGiB << 30, ComputeCapability: 90}}}
	}
	if err := CheckOffer(d, offer("H100", 8, 80)); err != nil {
		t.Errorf("8 attested H100s: %v", err)
	}
	for _, o := range []*marketpb.Offer{offer("H100", 9, 80), offer("H200", 1, 80), offer("H100", 1, 141)} {
		if err := CheckOffer(d, o); !errors.Is(err, ErrNotAttested) {
			t.Errorf("offer %v passed", o.Gpus[0])
		}
	}
	later := NewDocument(fakeInventory(t, "dgxh100"), id, challenge(t), time.Now(), nil)
	later.DriverVersion = "999.0"
	if ch := Changes(d, later); len(ch) != 17 {
		t.Errorf("changes = %v, want 8 new, 8 gone and the driver", ch)
	}
	if ch := Changes(d, d); len(ch) != 0 {
		t.Errorf("a document differs from itself: %v", ch)
	}
}

func FuzzVerifyDocument(f *testing.F) {
	key, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(key)
	ch := Challenge{Challenger: id, Nonce: make([]byte, NonceSize)}
	now := time.Unix(1_800_000_000, 0)
	d := &pb.Document{Version: DocumentVersion, Issuer: []byte(id), Nonce: ch.Nonce, Challenger: []byte(ch.Challenger), CreatedUnixMs: now.UnixMilli(),
		Gpus: []*pb.GPUFingerprint{{Uuid: "GPU-1", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, ComputeCapability: "9.0"}}}
	env, err := SignDocument(key, d)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := VerifyDocument(data, id, ch, now, time.Minute)
		if err == nil && (peer.ID(doc.Issuer) != id || string(doc.Nonce) != string(ch.Nonce) || peer.ID(doc.Challenger) != ch.Challenger) {
			t.Fatal("verified a document of another issuer, nonce or challenger")
		}
	})
}

func TestStandingDocument(t *testing.T) {
	key, id := newKey(t)
	otherKey, _ := newKey(t)
	inv := fakeInventory(t, "dgxh200")
	now := time.Now()
	sign := func(k crypto.PrivKey, d *pb.Document) []byte {
		env, err := SignDocument(k, d)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	standing := sign(key, NewDocument(inv, id, Challenge{}, now, []string{"gpus"}))
	hash := DocumentHash(standing)
	d, err := VerifyStanding(standing, id, "", hash, "gpus")
	if err != nil {
		t.Fatalf("standing document: %v", err)
	}
	fresh := NewDocument(inv, id, challenge(t), now.Add(time.Minute), []string{"gpus"})
	fresh.Gpus[0].CcReport = []byte("per-nonce evidence does not count as a change")
	if err := SameHardware(d, fresh); err != nil {
		t.Fatalf("same hardware: %v", err)
	}

	otherID, _ := peer.IDFromPrivateKey(otherKey)
	withNonce := sign(key, NewDocument(inv, id, challenge(t), now, []string{"gpus"}))
	otherOffer := sign(key, NewDocument(inv, id, Challenge{}, now, []string{"other"}))
	bySomeoneElse := sign(otherKey, NewDocument(inv, otherID, Challenge{}, now, []string{"gpus"}))
	ofAnotherSwarm := sign(key, NewDocument(inv, id, Challenge{Swarm: "lab"}, now, []string{"gpus"}))
	for _, c := range []struct {
		name string
		env  []byte
		hash []byte
		want error
	}{
		{"another document than the hash names", withNonce, hash, ErrDocHash},
		{"a challenge's document", withNonce, DocumentHash(withNonce), ErrDocInvalid},
		{"backs another offer", otherOffer, DocumentHash(otherOffer), ErrDocOffer},
		{"another provider's", bySomeoneElse, DocumentHash(bySomeoneElse), ErrDocSigner},
		{"another swarm's", ofAnotherSwarm, DocumentHash(ofAnotherSwarm), ErrDocSwarm},
		{"empty", nil, hash, ErrDocHash},
	} {
		if _, err := VerifyStanding(c.env, id, "", c.hash, "gpus"); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	gone := NewDocument(inv, id, challenge(t), now, nil)
	gone.Gpus = gone.Gpus[1:]
	swapped := NewDocument(inv, id, challenge(t), now, nil)
	swapped.Gpus[3].SerialHash = SerialHash("another board", id)
	upgraded := NewDocument(inv, id, challenge(t), now, nil)
	upgraded.DriverVersion = "999.1"
	for name, f := range map[string]*pb.Document{"GPU gone": gone, "board swapped": swapped, "driver changed": upgraded} {
		if err := SameHardware(d, f); !errors.Is(err, ErrDocChanged) {
			t.Errorf("%s: %v, want ErrDocChanged", name, err)
		}
	}
}
