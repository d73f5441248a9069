package attest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market/gpus"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	marketpb "github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// Document envelope domain and payload type, and limits.
const (
	DocumentDomain  = "idlegrid-attestation"
	NonceSize       = 32
	MaxDocumentSize = 256 << 10
	// DocumentVersion is the version this package writes and accepts.
	DocumentVersion = 1
)

var documentCodec = []byte("/idlegrid/attestation/1")

type docRecord struct{ doc *pb.Document }

func (r *docRecord) Domain() string { return DocumentDomain }
func (r *docRecord) Codec() []byte  { return documentCodec }
func (r *docRecord) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(r.doc)
}
func (r *docRecord) UnmarshalRecord(b []byte) error {
	r.doc = new(pb.Document)
	return market.Unmarshal(b, r.doc)
}

// SerialHash hides a GPU serial: SHA-256 of the serial and the issuer's
// peer ID, stable for one provider and useless to anyone else.
func SerialHash(serial string, issuer peer.ID) []byte {
	h := sha256.New()
	h.Write([]byte(serial))
	h.Write([]byte(issuer))
	return h.Sum(nil)
}

// Challenge is what a document answers: a challenger's nonce, in a
// swarm. One with no nonce is none: a standing document's, which names
// only its swarm.
type Challenge struct {
	Swarm      string // the swarm's tag; empty: the public swarm
	Challenger peer.ID
	Nonce      []byte
}

// CCNonce is the nonce issuer's GPUs sign their CC reports over when
// answering c: bound to the issuer, the challenger, the nonce and the
// swarm, so a
// report shows which peer's machine held the GPU, for whom and when; it
// cannot be lifted into another peer's document.
func (c Challenge) CCNonce(issuer peer.ID) []byte {
	h := sha256.New()
	h.Write([]byte("idlegrid/attest/cc/1\x00"))
	for _, part := range [][]byte{[]byte(issuer), []byte(c.Challenger), c.Nonce, []byte(c.Swarm)} {
		var n [2]byte
		n[0], n[1] = byte(len(part)>>8), byte(len(part))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// NewDocument states an inventory as issuer's, answering c (one with no
// nonce for a standing document) at now, backing the offers named.
func NewDocument(inv Inventory, issuer peer.ID, c Challenge, now time.Time, offerIDs []string) *pb.Document {
	d := &pb.Document{
		Version: DocumentVersion, Issuer: []byte(issuer), Swarm: c.Swarm, Nonce: slices.Clone(c.Nonce), Challenger: []byte(c.Challenger), CreatedUnixMs: now.UnixMilli(),
		DriverVersion: inv.DriverVersion, CudaVersion: inv.CUDAVersion, OfferIds: slices.Clone(offerIDs),
	}
	for _, g := range inv.GPUs {
		d.Gpus = append(d.Gpus, &pb.GPUFingerprint{
			Uuid: g.UUID, Name: g.Name, MemoryBytes: g.MemoryBytes, Vbios: g.VBIOS, PciDeviceId: g.PCIDeviceID,
			PciBusId: g.PCIBusID, SerialHash: SerialHash(g.Serial, issuer), ComputeCapability: g.ComputeCapability,
		})
	}
	return d
}

// SignDocument seals d with key, whose peer must be d's issuer.
func SignDocument(key crypto.PrivKey, d *pb.Document) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if peer.ID(d.Issuer) != id {
		return nil, fmt.Errorf("%w: document names %s, key is %s", ErrDocSigner, peer.ID(d.Issuer), id)
	}
	env, err := record.Seal(&docRecord{d}, key)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// DocumentHash is what an offer's attestation_hash holds: SHA-256 of the
// signed envelope.
func DocumentHash(env []byte) []byte {
	sum := sha256.Sum256(env)
	return sum[:]
}

// VerifyDocument checks a signed document from want against the
// challenge the verifier sent: signature, signer, that it answers this
// challenger's nonce in this swarm, and that it was made within maxAge
// of now (and not
// ahead of it by more than maxAge). Each failure has its own error.
func VerifyDocument(env []byte, want peer.ID, c Challenge, now time.Time, maxAge time.Duration) (*pb.Document, error) {
	if len(env) > MaxDocumentSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrDocInvalid, len(env), MaxDocumentSize)
	}
	d, err := openDocument(env)
	if err != nil {
		return nil, err
	}
	if d.Version != DocumentVersion {
		return nil, fmt.Errorf("%w: version %d", ErrDocInvalid, d.Version)
	}
	if peer.ID(d.Issuer) != want {
		return nil, fmt.Errorf("%w: want %s", ErrDocSigner, want)
	}
	if len(c.Nonce) != NonceSize || !bytes.Equal(d.Nonce, c.Nonce) {
		return nil, ErrDocNonce
	}
	if d.Swarm != c.Swarm {
		return nil, fmt.Errorf("%w: made in swarm %q, not %q", ErrDocSwarm, d.Swarm, c.Swarm)
	}
	if peer.ID(d.Challenger) != c.Challenger {
		return nil, fmt.Errorf("%w: it answers %s", ErrDocChallenger, peer.ID(d.Challenger))
	}
	age := now.Sub(time.UnixMilli(d.CreatedUnixMs))
	if age > maxAge || age < -maxAge {
		return nil, fmt.Errorf("%w: made %s from now, limit %s", ErrDocStale, age.Round(time.Millisecond), maxAge)
	}
	return d, nil
}

// AttachCC puts each GPU's CC evidence into d's fingerprints, by UUID.
func AttachCC(d *pb.Document, evidence []CCEvidence) {
	for _, e := range evidence {
		for _, g := range d.Gpus {
			if g.Uuid == e.UUID {
				g.CcReport, g.CcCertChain = slices.Clone(e.Report), slices.Clone(e.CertChain)
			}
		}
	}
}

// VerifyStanding checks the standing document an offer names by its
// attestation hash: the envelope hashes to hash, was signed by want in
// swarm, is standing (it has no nonce, it answers no challenge) and
// backs offerID.
// Its freshness is the offer's: a provider makes a new one with each offer.
func VerifyStanding(env []byte, want peer.ID, swarm string, hash []byte, offerID string) (*pb.Document, error) {
	if len(env) > MaxDocumentSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrDocInvalid, len(env), MaxDocumentSize)
	}
	if !bytes.Equal(DocumentHash(env), hash) {
		return nil, ErrDocHash
	}
	d, err := openDocument(env)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Version != DocumentVersion:
		return nil, fmt.Errorf("%w: version %d", ErrDocInvalid, d.Version)
	case peer.ID(d.Issuer) != want:
		return nil, fmt.Errorf("%w: want %s", ErrDocSigner, want)
	case d.Swarm != swarm:
		return nil, fmt.Errorf("%w: made in swarm %q, not %q", ErrDocSwarm, d.Swarm, swarm)
	case len(d.Nonce) != 0 || len(d.Challenger) != 0:
		return nil, fmt.Errorf("%w: a standing attestation answers no challenge", ErrDocInvalid)
	case !slices.Contains(d.OfferIds, offerID):
		return nil, fmt.Errorf("%w: it backs %q, not %q", ErrDocOffer, d.OfferIds, offerID)
	}
	return d, nil
}

// SameHardware reports whether every GPU of the standing document is in
// the fresh one with the same fingerprint (CC evidence aside, which is
// per nonce): the hardware an offer was made from is still there.
func SameHardware(standing, fresh *pb.Document) error {
	now := map[string]*pb.GPUFingerprint{}
	for _, g := range fresh.Gpus {
		now[g.Uuid] = g
	}
	for _, g := range standing.Gpus {
		f, ok := now[g.Uuid]
		if !ok {
			return fmt.Errorf("%w: GPU %s gone", ErrDocChanged, g.Uuid)
		}
		a, b := proto.Clone(g).(*pb.GPUFingerprint), proto.Clone(f).(*pb.GPUFingerprint)
		a.CcReport, a.CcCertChain, b.CcReport, b.CcCertChain = nil, nil, nil, nil
		if !proto.Equal(a, b) {
			return fmt.Errorf("%w: GPU %s fingerprint differs", ErrDocChanged, g.Uuid)
		}
	}
	if standing.DriverVersion != fresh.DriverVersion {
		return fmt.Errorf("%w: driver %s → %s", ErrDocChanged, standing.DriverVersion, fresh.DriverVersion)
	}
	return nil
}

// CheckOffer reports whether every GPU an offer claims is among the
// attested ones: for each group, at least as many attested GPUs of that
// model with at least that memory and that compute capability.
func CheckOffer(d *pb.Document, o *marketpb.Offer) error {
	free := slices.Clone(d.Gpus)
	for _, g := range o.Gpus {
		cc := fmt.Sprintf("%d.%d", g.ComputeCapability/10, g.ComputeCapability%10)
		for range g.Count {
			i := slices.IndexFunc(free, func(f *pb.GPUFingerprint) bool {
				if f == nil {
					return false
				}
				model := ModelOf(f.Name, f.PciDeviceId)
				return gpus.Default().Covers(g.Model, model) && VRAMOf(model, f.MemoryBytes) >= g.VramBytes && f.ComputeCapability == cc
			})
			if i < 0 {
				return fmt.Errorf("%w: %d × %s", ErrNotAttested, g.Count, g.Model)
			}
			free[i] = nil
		}
	}
	return nil
}

// Changes lists what differs between two documents of one provider: GPUs
// that appeared or vanished, and driver or CUDA versions.
func Changes(prev, cur *pb.Document) []string {
	var out []string
	seen := map[string]bool{}
	for _, g := range prev.Gpus {
		seen[g.Uuid] = true
	}
	for _, g := range cur.Gpus {
		if !seen[g.Uuid] {
			out = append(out, "new GPU "+g.Uuid)
		}
		delete(seen, g.Uuid)
	}
	for _, g := range prev.Gpus {
		if seen[g.Uuid] {
			out = append(out, "GPU gone "+g.Uuid)
		}
	}
	if prev.DriverVersion != cur.DriverVersion {
		out = append(out, fmt.Sprintf("driver %s → %s", prev.DriverVersion, cur.DriverVersion))
	}
	if prev.CudaVersion != cur.CudaVersion {
		out = append(out, fmt.Sprintf("CUDA %s → %s", prev.CudaVersion, cur.CudaVersion))
	}
	return out
}
