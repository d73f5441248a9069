package attest

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	marketpb "github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Coverage says how a verified document backs the offer the challenger
// holds of the provider.
type Coverage int

// Coverages, from none to full.
const (
	// CoverageNoOffer: the challenger holds no offer of the provider.
	CoverageNoOffer Coverage = iota
	// CoverageNone: the offer claims what the document does not show,
	// or names a standing attestation of other hardware.
	CoverageNone
	// CoverageNoStanding: the document shows every GPU the offer claims;
	// the offer names no standing attestation.
	CoverageNoStanding
	// CoverageFull: as CoverageNoStanding, and the standing attestation
	// the offer names by hash shows the same hardware.
	CoverageFull
)

// Covered reports whether the offer is backed by the document.
func (c Coverage) Covered() bool { return c >= CoverageNoStanding }

// Verdict is what a challenger makes of a provider's answer: whether the
// fresh document verifies, each GPU's confidential-computing verdict, and
// how the document backs the provider's offer.
type Verdict struct {
	// Doc is the verified fresh document; nil when Err is set.
	Doc *pb.Document
	// Err says why the fresh document does not verify.
	Err error
	// CC is each GPU's CC verdict, in Doc's order; CCSummary folds them.
	CC        []string
	CCSummary string
	Coverage  Coverage
	// CoverageErr says why the offer is not covered (CoverageNone), or
	// is ErrNoOffer (CoverageNoOffer).
	CoverageErr error
}

// Verified reports whether the fresh document verified.
func (v Verdict) Verified() bool { return v.Err == nil }

// Problem says why a renter cannot lease on this verdict: a document that
// does not verify, or an offer it does not cover; nil when it can. An
// offer the renter does not hold is not a problem here: the lease names
// the offer, and the provider checks it.
func (v Verdict) Problem() error {
	switch {
	case v.Err != nil:
		return v.Err
	case v.Coverage == CoverageNone:
		return fmt.Errorf("offer not covered: %w", v.CoverageErr)
	}
	return nil
}

// OfferLine says in words how the document backs the offer.
func (v Verdict) OfferLine() string {
	switch v.Coverage {
	case CoverageNone:
		return "not covered: " + v.CoverageErr.Error()
	case CoverageNoStanding:
		return "covered; the offer names no standing attestation"
	case CoverageFull:
		return "covered; its attestation hash matches the hardware"
	}
	return ErrNoOffer.Error()
}

// Judge verifies provider p's answer to challenge c: the fresh document
// (signature, signer, challenger and nonce, freshness within maxAge of
// now), each GPU's CC evidence over c's nonce for p against roots (nil:
// shown, not verified), and how it backs o, p's offer as the challenger
// holds it (nil if none), with the standing document the provider sent.
func Judge(p peer.ID, c Challenge, fresh, standing []byte, o *marketpb.Offer, roots *x509.CertPool, now time.Time, maxAge time.Duration) Verdict {
	d, err := VerifyDocument(fresh, p, c, now, maxAge)
	if err != nil {
		return Verdict{Err: err, Coverage: CoverageNoOffer, CoverageErr: ErrNoOffer}
	}
	v := Verdict{Doc: d}
	ccNonce := c.CCNonce(p)
	for _, g := range d.Gpus {
		v.CC = append(v.CC, CCVerdict(g.CcReport, g.CcCertChain, ccNonce, roots, now))
	}
	v.CCSummary = SummariseCC(v.CC)
	v.Coverage, v.CoverageErr = CoverageOf(d, o, standing, p)
	return v
}

// CoverageOf says how the fresh document d of provider p backs its offer
// o (nil: none held): o's GPUs are among d's, and the standing document
// o names by hash is the one p sent, in d's swarm, and shows the same
// hardware.
func CoverageOf(d *pb.Document, o *marketpb.Offer, standing []byte, p peer.ID) (Coverage, error) {
	if o == nil {
		return CoverageNoOffer, ErrNoOffer
	}
	if err := CheckOffer(d, o); err != nil {
		return CoverageNone, err
	}
	if len(o.AttestationHash) == 0 {
		return CoverageNoStanding, nil
	}
	sd, err := VerifyStanding(standing, p, d.Swarm, o.AttestationHash, o.Header.GetId())
	if err == nil {
		err = SameHardware(sd, d)
	}
	if err != nil {
		return CoverageNone, err
	}
	return CoverageFull, nil
}

// SummariseCC folds per-GPU CC verdicts into one: the verdict all share,
// or "mixed: " and the first that is not "verified".
func SummariseCC(verdicts []string) string {
	if len(verdicts) == 0 {
		return CCAbsent
	}
	for _, v := range verdicts[1:] {
		if v != verdicts[0] {
			i := slices.IndexFunc(verdicts, func(w string) bool { return w != CCVerified })
			return "mixed: " + verdicts[i]
		}
	}
	return verdicts[0]
}
