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
	n := nonce(t)
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
		name  string
		env   []byte
		want  peer.ID
		nonce []byte
		at    time.Time
		err   error
	}{
		{"changed bytes", tampered, id, n, now, ErrDocSignature},
		{"replayed nonce", env, id, nonce(t), now, ErrDocNonce},
		{"stale", env, id, n, now.Add(2 * time.Minute), ErrDocStale},
		{"from the future", env, id, n, now.Add(-2 * time.Minute), ErrDocStale},
		{"wrong signer", env, other, n, now, ErrDocSigner},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := VerifyDocument(tc.env, tc.want, tc.nonce, tc.at, time.Minute); !errors.Is(err, tc.err) {
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
	d := NewDocument(inv, id, nonce(t), time.Now(), nil)
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
	later := NewDocument(fakeInventory(t, "dgxh100"), id, nonce(t), time.Now(), nil)
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
	n := make([]byte, NonceSize)
	now := time.Unix(1_800_000_000, 0)
	d := &pb.Document{Version: DocumentVersion, Issuer: []byte(id), Nonce: n, CreatedUnixMs: now.UnixMilli(),
		Gpus: []*pb.GPUFingerprint{{Uuid: "GPU-1", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, ComputeCapability: "9.0"}}}
	env, err := SignDocument(key, d)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := VerifyDocument(data, id, n, now, time.Minute)
		if err == nil && (peer.ID(doc.Issuer) != id || string(doc.Nonce) != string(n)) {
			t.Fatal("verified a document of another issuer or nonce")
		}
	})
}
