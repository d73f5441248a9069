package attest

import (
	"crypto/rand"
	"crypto/x509"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest/attesttest"
	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	mpb "github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// signedDoc is key's document of the GPUs named, made at, answering a
// challenge of no one.
func signedDoc(t testing.TB, key crypto.PrivKey, at time.Time, uuids ...string) []byte {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	d := &pb.Document{Version: DocumentVersion, Issuer: []byte(id), Nonce: make([]byte, NonceSize), CreatedUnixMs: at.UnixMilli()}
	for _, u := range uuids {
		d.Gpus = append(d.Gpus, &pb.GPUFingerprint{Uuid: u, Name: "NVIDIA H100 80GB HBM3"})
	}
	return sealDoc(t, key, d)
}

func sealDoc(t testing.TB, key crypto.PrivKey, d *pb.Document) []byte {
	t.Helper()
	env, err := SignDocument(key, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// ccDoc is key's answer, made at, to a fresh challenge: one GPU named
// uuid, with CC evidence from fake GPU i of authority a over the nonce
// bound to key's peer and the challenge; or over ccNonce if not nil.
func ccDoc(t testing.TB, key crypto.PrivKey, at time.Time, a *attesttest.CCAuthority, i int, uuid string, ccNonce []byte) (*pb.Document, []byte) {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(key)
	_, challenger := keyOf(t)
	ch := Challenge{Challenger: challenger, Nonce: make([]byte, NonceSize)}
	rand.Read(ch.Nonce)
	if ccNonce == nil {
		ccNonce = ch.CCNonce(id)
	}
	report, chain := a.Evidence(i, ccNonce)
	d := NewDocument(Inventory{GPUs: []GPU{{UUID: uuid, Name: "NVIDIA H100 80GB HBM3"}}}, id, ch, at, nil)
	AttachCC(d, []CCEvidence{{UUID: uuid, Report: report, CertChain: chain}})
	return d, sealDoc(t, key, d)
}

func ev(t testing.TB, a, b []byte) []byte {
	t.Helper()
	data, err := NewEvidence(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Evidence proves or it does not count (issue 11, attack 1: a throwaway
// key's document claiming a victim's GPU UUID, paired with the victim's
// own, excluded the victim everywhere, for good).
func TestVerifyEvidence(t *testing.T) {
	alice, aliceID := keyOf(t)
	bob, bobID := keyOf(t)
	mallory, _ := keyOf(t)
	a := attesttest.NewCCAuthority(t)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(a.RootPEM()) {
		t.Fatal("no root")
	}
	now := time.Now()

	// One key signs different GPU sets within a minute: that key's peer.
	got, err := VerifyEvidence(ev(t, signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now.Add(30*time.Second), "GPU-1", "GPU-9")), "", nil)
	if err != nil || len(got) != 1 || got[0] != aliceID {
		t.Errorf("conflicting documents: %v, %v", got, err)
	}
	// One GPU's certificate answered for two peers within a minute: both.
	_, docA := ccDoc(t, alice, now, a, 0, "GPU-1", nil)
	_, docB := ccDoc(t, bob, now.Add(10*time.Second), a, 0, "GPU-7", nil)
	got, err = VerifyEvidence(ev(t, docA, docB), "", roots)
	if err != nil || len(got) != 2 || !slices.Contains(got, aliceID) || !slices.Contains(got, bobID) {
		t.Errorf("one GPU certificate for two peers: %v, %v", got, err)
	}

	// What proves nothing is refused.
	victim, victimDoc := ccDoc(t, alice, now, a, 0, "GPU-1", nil)
	_, lifted := ccDoc(t, mallory, now, a, 0, "GPU-1", victim.Gpus[0].CcReport[ccNonceOffset:ccNonceOffset+NonceSize])
	_, otherGPU := ccDoc(t, bob, now, a, 1, "GPU-1", nil)
	_, hourLater := ccDoc(t, bob, now.Add(time.Hour), a, 0, "GPU-1", nil)
	labDoc := func(uuids ...string) []byte {
		var inv Inventory
		for _, u := range uuids {
			inv.GPUs = append(inv.GPUs, GPU{UUID: u})
		}
		return sealDoc(t, alice, NewDocument(inv, aliceID, Challenge{Swarm: "lab"}, now, nil))
	}
	bad := append([]byte(nil), signedDoc(t, bob, now, "GPU-1")...)
	bad[len(bad)-3] ^= 1
	for _, c := range []struct {
		name  string
		data  []byte
		roots *x509.CertPool
		err   error
	}{
		{"a stranger's document claiming the victim's UUID", ev(t, victimDoc, signedDoc(t, mallory, now, "GPU-1")), roots, ErrNoEvidence},
		{"two peers naming one UUID, no roots to settle it", ev(t, signedDoc(t, alice, now, "GPU-1"), signedDoc(t, bob, now, "GPU-1")), nil, ErrEvidenceUnchecked},
		{"a CC report lifted from the victim's document", ev(t, victimDoc, lifted), roots, ErrNoEvidence},
		{"two GPUs' certificates under one UUID", ev(t, victimDoc, otherGPU), roots, ErrNoEvidence},
		{"one GPU an hour apart: it may change hands", ev(t, victimDoc, hourLater), roots, ErrNoEvidence},
		{"different GPUs of two peers", ev(t, signedDoc(t, alice, now, "GPU-1"), signedDoc(t, bob, now, "GPU-2")), roots, ErrNoEvidence},
		{"a change an hour apart", ev(t, signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now.Add(time.Hour), "GPU-2")), nil, ErrNoEvidence},
		{"the same document twice", ev(t, signedDoc(t, alice, now, "GPU-1"), signedDoc(t, alice, now, "GPU-1")), nil, ErrNoEvidence},
		{"a forged document", ev(t, signedDoc(t, alice, now, "GPU-1"), bad), nil, ErrDocSignature},
		{"a contradiction made in another swarm", ev(t, labDoc("GPU-1"), labDoc("GPU-1", "GPU-9")), nil, ErrDocSwarm},
		{"garbage", []byte("not evidence"), nil, ErrNoEvidence},
		{"too large", make([]byte, MaxEvidenceSize+1), nil, ErrNoEvidence},
	} {
		if offenders, err := VerifyEvidence(c.data, "", c.roots); !errors.Is(err, c.err) || offenders != nil {
			t.Errorf("%s: offenders %v, err %v; want %v", c.name, offenders, err, c.err)
		}
	}
}

func FuzzVerifyEvidence(f *testing.F) {
	alice, _, _ := crypto.GenerateEd25519Key(nil)
	bob, _, _ := crypto.GenerateEd25519Key(nil)
	a := attesttest.NewCCAuthority(f)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.RootPEM())
	now := time.Now()
	f.Add(ev(f, signedDoc(f, alice, now, "GPU-1"), signedDoc(f, bob, now, "GPU-1")))
	f.Add(ev(f, signedDoc(f, alice, now, "GPU-1"), signedDoc(f, alice, now, "GPU-2")))
	_, docA := ccDoc(f, alice, now, a, 0, "GPU-1", nil)
	_, docB := ccDoc(f, bob, now, a, 0, "GPU-1", nil)
	f.Add(ev(f, docA, docB))
	f.Fuzz(func(t *testing.T, data []byte) {
		offenders, err := VerifyEvidence(data, "", roots)
		if err == nil && (len(offenders) == 0 || len(offenders) > 2) {
			t.Fatalf("evidence with %d offenders", len(offenders))
		}
	})
}

// Two blocks of one peer's chain of lease records that cannot both be
// true prove that peer lied, as strongly as two documents do; two that
// agree, two peers' blocks, or blocks of another swarm prove nothing.
func TestChainEvidenceProvesARewrittenRecord(t *testing.T) {
	renter, provider := chaintest.NewParty(t), chaintest.NewParty(t)
	l, cs := chaintest.Lease(t, "l", renter, provider, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	failed := provider.Propose(t, chaintest.Receipt(l, cs, 10*time.Minute, mpb.Outcome_OUTCOME_FAILED), cs)
	agreed := renter.Agree(t, failed)
	rewritten := chaintest.Resign(t, provider.Key, failed, func(b *mpb.Block) {
		rc := failed.Receipt()
		rc.Outcome = mpb.Outcome_OUTCOME_COMPLETED
		b.Receipt, _ = proto.MarshalOptions{Deterministic: true}.Marshal(rc)
	})
	ev, err := NewChainEvidence(chain.Against(failed, rewritten))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := VerifyEvidence(ev, chaintest.Swarm, nil); err != nil || !slices.Equal(got, []peer.ID{provider.ID}) {
		t.Errorf("a fork in the provider's chain proves %v (%v), want the provider", got, err)
	}
	if _, err := VerifyEvidence(ev, "elsewhere", nil); !errors.Is(err, ErrNoEvidence) {
		t.Errorf("a fork shown in another swarm: %v", err)
	}
	for _, c := range []struct {
		name string
		a, b *chain.Block
	}{{"a proposal and its agreement", failed, agreed}, {"one block twice", failed, failed}} {
		ev, err := NewChainEvidence(&chain.Conflict{A: c.a.Signed, B: c.b.Signed})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := VerifyEvidence(ev, chaintest.Swarm, nil); !errors.Is(err, ErrNoEvidence) {
			t.Errorf("%s proves %v (%v)", c.name, got, err)
		}
	}
	mixed, _ := proto.Marshal(&pb.Evidence{Version: 1, DocumentA: []byte("doc"), BlockA: []byte("a"), BlockB: []byte("b")})
	if _, err := VerifyEvidence(mixed, chaintest.Swarm, nil); !errors.Is(err, ErrNoEvidence) {
		t.Errorf("documents and blocks in one piece of evidence: %v", err)
	}
}
