// Package attesttest makes confidential-computing evidence for tests: a
// certificate authority of its own (root, intermediate, per-GPU leaf, all
// ECDSA P-384 as on NVIDIA's) and SPDM measurement reports in the layout
// an H100 in CC mode gives, signed by the leaf. Only a real GPU has a
// certificate from NVIDIA's root; this is never the real thing.
package attesttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"
	"time"
)

// CCAuthority signs CC evidence for fake GPUs.
type CCAuthority struct {
	rootPEM []byte
	inter   *x509.Certificate
	interK  *ecdsa.PrivateKey
	mu      sync.Mutex
	leaves  map[int]leaf
	// NotAfter is when the leaf certificates it makes expire.
	NotAfter time.Time
}

type leaf struct {
	key   *ecdsa.PrivateKey
	chain []byte // PEM, leaf first
}

// NewCCAuthority makes a root and an intermediate, valid from an hour ago
// for a year.
func NewCCAuthority(t testing.TB) *CCAuthority {
	t.Helper()
	rootK := newKey(t)
	root := sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "test device identity root"}, IsCA: true}, nil, rootK, rootK)
	interK := newKey(t)
	inter := sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: "test GH100 provisioner"}, IsCA: true}, root, rootK, interK)
	return &CCAuthority{
		rootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw}),
		inter:   inter, interK: interK, leaves: map[int]leaf{},
		NotAfter: time.Now().Add(365 * 24 * time.Hour),
	}
}

// RootPEM is the root certificate a verifier configures.
func (a *CCAuthority) RootPEM() []byte { return a.rootPEM }

// Evidence makes GPU i's report over nonce and its chain (PEM, leaf first),
// in the shape attest.CCMaker wants.
func (a *CCAuthority) Evidence(i int, nonce []byte) (report, chain []byte) {
	l := a.leaf(i)
	return Report(l.key, nonce), l.chain
}

func (a *CCAuthority) leaf(i int) leaf {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.leaves[i]; ok {
		return l
	}
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(1000 + i)), Subject: pkix.Name{CommonName: "test GH100 attestation"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: a.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.inter, &k.PublicKey, a.interK)
	if err != nil {
		panic(err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.inter.Raw})...)
	l := leaf{key: k, chain: chain}
	a.leaves[i] = l
	return l
}

// Report builds an SPDM GET_MEASUREMENTS request over nonce and a response
// with one measurement block and some opaque data, signed by key: ECDSA
// P-384 over SHA-384 of everything before the 96-byte r‖s signature.
func Report(key *ecdsa.PrivateKey, nonce []byte) []byte {
	req := []byte{0x11, 0xe0, 0x01, 0xff}
	req = append(req, nonce...)
	req = append(req, 0x00) // slot
	record := []byte{0x01, 0x01, 0x33, 0x00, 0x01, 0x30, 0x00}
	record = append(record, make([]byte, 48)...)
	resp := []byte{0x11, 0x60, 0x00, 0x00, 0x01, byte(len(record)), byte(len(record) >> 8), byte(len(record) >> 16)}
	resp = append(resp, record...)
	respNonce := make([]byte, 32)
	rand.Read(respNonce)
	resp = append(resp, respNonce...)
	opaque := []byte("idlegrid test opaque data")
	resp = append(resp, byte(len(opaque)), byte(len(opaque)>>8))
	resp = append(resp, opaque...)
	body := append(req, resp...)
	sum := sha512.Sum384(body)
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		panic(err)
	}
	sig := make([]byte, 96)
	r.FillBytes(sig[:48])
	s.FillBytes(sig[48:])
	return append(body, sig...)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, parentK, k *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	sn, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = sn
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour)
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentK)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
