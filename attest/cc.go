package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/sha512"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"
)

// Confidential computing. A GPU in CC mode (H100, H200) answers NVML's
// nvmlDeviceGetConfComputeGpuAttestationReport with an SPDM
// GET_MEASUREMENTS exchange over the caller's 32-byte nonce, and
// nvmlDeviceGetConfComputeGpuCertificate with the attestation certificate
// chain (PEM, leaf first) whose leaf key signed it. The layout, as NVIDIA's
// verifier (nvtrust) reads it:
//
//	request  (37 bytes): version, code, param1, param2, nonce[32], slot
//	response: version, code, param1, param2, blocks, record length[3 LE],
//	          record, nonce[32], opaque length[2 LE], opaque, signature
//
// The signature is ECDSA P-384 (r‖s, 48 bytes each) over SHA-384 of the
// whole report but the signature.

// Report layout constants.
const (
	ccRequestLen   = 37
	ccSignatureLen = 96
	ccNonceOffset  = 4
)

// CC verdicts, as a verifier shows them.
const (
	CCAbsent      = "absent"
	CCNotVerified = "present, not verified"
	CCVerified    = "verified"
)

// LoadCCRoots reads PEM certificates (NVIDIA's device identity root) that
// CC certificate chains must lead to.
func LoadCCRoots(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

// ParseCertChain reads a chain given as PEM blocks or concatenated DER,
// leaf first.
func ParseCertChain(b []byte) ([]*x509.Certificate, error) {
	var der []byte
	if bytes.Contains(b, []byte("-----BEGIN")) {
		for {
			var blk *pem.Block
			if blk, b = pem.Decode(b); blk == nil {
				break
			}
			if blk.Type == "CERTIFICATE" {
				der = append(der, blk.Bytes...)
			}
		}
	} else {
		der = b
	}
	certs, err := x509.ParseCertificates(der)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}

// VerifyCC checks one GPU's CC evidence: the report answers nonce, its
// certificate chain leads to one of roots at now, and the chain's leaf
// signed the report. Each failure has its own error.
func VerifyCC(report, chain, nonce []byte, roots *x509.CertPool, now time.Time) error {
	if err := checkCCLayout(report); err != nil {
		return err
	}
	if !bytes.Equal(report[ccNonceOffset:ccNonceOffset+NonceSize], nonce) {
		return ErrCCNonce
	}
	certs, err := ParseCertChain(chain)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCCChain, err)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := certs[0].Verify(opts); err != nil {
		return fmt.Errorf("%w: %v", ErrCCChain, err)
	}
	key, ok := certs[0].PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return fmt.Errorf("%w: leaf key is %T, want ECDSA", ErrCCSignature, certs[0].PublicKey)
	}
	body, sig := report[:len(report)-ccSignatureLen], report[len(report)-ccSignatureLen:]
	sum := sha512.Sum384(body)
	r := new(big.Int).SetBytes(sig[:ccSignatureLen/2])
	s := new(big.Int).SetBytes(sig[ccSignatureLen/2:])
	if !ecdsa.Verify(key, sum[:], r, s) {
		return ErrCCSignature
	}
	return nil
}

// checkCCLayout checks that the report's length fields fit the bytes there,
// ending exactly at the signature.
func checkCCLayout(report []byte) error {
	const fixed = 8 + NonceSize + 2 // response header, nonce, opaque length
	if len(report) < ccRequestLen+fixed+ccSignatureLen {
		return fmt.Errorf("%w: %d bytes", ErrCCMalformed, len(report))
	}
	resp := report[ccRequestLen:]
	record := int(resp[5]) | int(resp[6])<<8 | int(resp[7])<<16
	if 8+record+NonceSize+2 > len(resp) {
		return fmt.Errorf("%w: measurement record of %d bytes overruns the report", ErrCCMalformed, record)
	}
	at := 8 + record + NonceSize
	opaque := int(resp[at]) | int(resp[at+1])<<8
	if at+2+opaque+ccSignatureLen != len(resp) {
		return fmt.Errorf("%w: lengths add to %d bytes, report has %d", ErrCCMalformed, ccRequestLen+at+2+opaque+ccSignatureLen, len(report))
	}
	return nil
}

// CCVerdict says what a verifier makes of one GPU's CC evidence: absent,
// present but not verified (no roots configured), verified, or the reason
// it failed.
func CCVerdict(report, chain, nonce []byte, roots *x509.CertPool, now time.Time) string {
	switch {
	case len(report) == 0:
		return CCAbsent
	case roots == nil:
		return CCNotVerified
	}
	if err := VerifyCC(report, chain, nonce, roots, now); err != nil {
		return "invalid: " + err.Error()
	}
	return CCVerified
}
