//go:build cgo

package attest_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/attest/attesttest"
)

func ccRoots(t *testing.T, a *attesttest.CCAuthority) *x509.CertPool {
	t.Helper()
	p := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(p, a.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	roots, err := attest.LoadCCRoots(p)
	if err != nil {
		t.Fatal(err)
	}
	return roots
}

func nonce(t *testing.T) []byte {
	n := make([]byte, attest.NonceSize)
	if _, err := rand.Read(n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestVerifyCC(t *testing.T) {
	a := attesttest.NewCCAuthority(t)
	roots := ccRoots(t, a)
	other := ccRoots(t, attesttest.NewCCAuthority(t))
	n := nonce(t)
	report, chain := a.Evidence(0, n)
	_, chain1 := a.Evidence(1, n)
	now := time.Now()
	flip := func(i int) []byte { b := bytes.Clone(report); b[i] ^= 1; return b }
	cases := []struct {
		name          string
		report, chain []byte
		nonce         []byte
		roots         *x509.CertPool
		at            time.Time
		want          error
	}{
		{"good", report, chain, n, roots, now, nil},
		{"another nonce", report, chain, nonce(t), roots, now, attest.ErrCCNonce},
		{"measurement changed", flip(50), chain, n, roots, now, attest.ErrCCSignature},
		{"signature changed", flip(len(report) - 1), chain, n, roots, now, attest.ErrCCSignature},
		{"another GPU's certificate", report, chain1, n, roots, now, attest.ErrCCSignature},
		{"another root", report, chain, n, other, now, attest.ErrCCChain},
		{"certificate expired", report, chain, n, roots, now.Add(2 * 365 * 24 * time.Hour), attest.ErrCCChain},
		{"no chain", report, nil, n, roots, now, attest.ErrCCChain},
		{"garbage chain", report, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), n, roots, now, attest.ErrCCChain},
		{"truncated", report[:len(report)-1], chain, n, roots, now, attest.ErrCCMalformed},
		{"too short", report[:100], chain, n, roots, now, attest.ErrCCMalformed},
		{"record length overruns", func() []byte { b := bytes.Clone(report); b[37+7] = 0xff; return b }(), chain, n, roots, now, attest.ErrCCMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := attest.VerifyCC(c.report, c.chain, c.nonce, c.roots, c.at)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("VerifyCC = %v, want %v", err, c.want)
			}
		})
	}
}

func TestVerifyCCRefusesStrangersSignature(t *testing.T) {
	// The chain verifies, but the report was signed by a key that is not
	// its leaf's.
	k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	n := nonce(t)
	a := attesttest.NewCCAuthority(t)
	_, chain := a.Evidence(0, n)
	if err := attest.VerifyCC(attesttest.Report(k, n), chain, n, ccRoots(t, a), time.Now()); !errors.Is(err, attest.ErrCCSignature) {
		t.Fatalf("report signed by a stranger's key: %v, want ErrCCSignature", err)
	}
}

func TestCCVerdict(t *testing.T) {
	a := attesttest.NewCCAuthority(t)
	n := nonce(t)
	report, chain := a.Evidence(0, n)
	now := time.Now()
	for _, c := range []struct {
		name, want    string
		report, nonce []byte
		roots         *x509.CertPool
	}{
		{"absent", attest.CCAbsent, nil, n, ccRoots(t, a)},
		{"no roots", attest.CCNotVerified, report, n, nil},
		{"verified", attest.CCVerified, report, n, ccRoots(t, a)},
		{"invalid", "invalid: " + attest.ErrCCNonce.Error(), report, nonce(t), ccRoots(t, a)},
	} {
		if got := attest.CCVerdict(c.report, chain, c.nonce, c.roots, now); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// The NVML source reads CC evidence through the same calls a real H100
// answers, here go-nvml's mock server in CC mode.
func TestNVMLSourceCCEvidence(t *testing.T) {
	f, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := nonce(t)
	ev, err := f.CCEvidence(ctx, n)
	if err != nil || len(ev) != 0 {
		t.Fatalf("CC mode off: %d pieces of evidence, err %v; want none", len(ev), err)
	}
	a := attesttest.NewCCAuthority(t)
	f.EnableCC(a.Evidence)
	if ev, err = f.CCEvidence(ctx, n); err != nil {
		t.Fatal(err)
	}
	inv, err := f.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev) != len(inv.GPUs) {
		t.Fatalf("%d pieces of evidence for %d GPUs", len(ev), len(inv.GPUs))
	}
	roots := ccRoots(t, a)
	for i, e := range ev {
		if e.UUID != inv.GPUs[i].UUID {
			t.Errorf("evidence %d names %s, GPU is %s", i, e.UUID, inv.GPUs[i].UUID)
		}
		if err := attest.VerifyCC(e.Report, e.CertChain, n, roots, time.Now()); err != nil {
			t.Errorf("GPU %d: %v", i, err)
		}
	}
	if _, err := f.CCEvidence(ctx, n[:8]); err == nil {
		t.Error("an 8-byte nonce was accepted")
	}
}

func FuzzVerifyCC(f *testing.F) {
	a := attesttest.NewCCAuthority(f)
	n := make([]byte, attest.NonceSize)
	report, chain := a.Evidence(0, n)
	f.Add(report, chain)
	f.Add(report[:200], chain[:100])
	f.Add([]byte{}, []byte{})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.RootPEM())
	now := time.Now()
	f.Fuzz(func(t *testing.T, report, chain []byte) {
		err := attest.VerifyCC(report, chain, n, roots, now)
		if err == nil && !bytes.Equal(report[4:36], n) {
			t.Fatal("verified a report over another nonce")
		}
	})
}
