package attest

import (
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	mpb "github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// Evidence limits.
const (
	MaxEvidenceSize = 2*MaxDocumentSize + 64
	// ConflictWindow is how close in time two documents of one peer must be
	// made for different GPU sets to be a contradiction rather than a change.
	ConflictWindow = time.Minute
)

// NewEvidence pairs two signed documents that cannot both be true.
func NewEvidence(docA, docB []byte) ([]byte, error) {
	return proto.Marshal(&pb.Evidence{Version: 1, DocumentA: docA, DocumentB: docB})
}

// NewChainEvidence is the evidence of a conflict in a peer's chain of
// lease records: its two blocks.
func NewChainEvidence(c *chain.Conflict) ([]byte, error) {
	a, err := proto.Marshal(c.A)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(c.B)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(&pb.Evidence{Version: 1, BlockA: a, BlockB: b})
}

// VerifyEvidence checks evidence and returns the offenders it proves.
// Evidence must prove, never merely accuse: a key costs nothing, so a
// document anyone can sign is no claim against anyone else. It proves
//   - one key that signed two documents within ConflictWindow of each
//     other listing different GPUs: that key's peer, and no other;
//   - two peers whose documents, made within ConflictWindow of each other,
//     each carry a CC report that verifies against roots over the nonce
//     bound to that document's issuer and challenge, made by one GPU
//     certificate's key: both, since one GPU answered for both machines
//     (no peer can make another's GPU sign a nonce bound to itself);
//   - two blocks of one peer's chain of lease records, in swarm, that
//     cannot both be true (chain.Prove: a fork, a broken link, a lease
//     closed twice): that peer, which rewrote or doubled its own record.
//
// Two peers naming one GPU UUID prove nothing by themselves: a UUID is a
// string anyone can write. With roots nil, evidence across two peers
// cannot be checked here and is refused with ErrEvidenceUnchecked. Both
// documents must verify as signed by their issuers, made in swarm (the
// verifier's). Anything else is an error wrapping ErrNoEvidence,
// ErrDocSignature, ErrDocSigner or ErrDocSwarm.
func VerifyEvidence(data []byte, swarm string, roots *x509.CertPool) ([]peer.ID, error) {
	if len(data) > MaxEvidenceSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrNoEvidence, len(data), MaxEvidenceSize)
	}
	var ev pb.Evidence
	if err := market.Unmarshal(data, &ev); err != nil || ev.Version != 1 {
		return nil, fmt.Errorf("%w: malformed", ErrNoEvidence)
	}
	if len(ev.BlockA) > 0 || len(ev.BlockB) > 0 {
		return chainEvidence(&ev, swarm)
	}
	a, err := openDocument(ev.DocumentA)
	if err != nil {
		return nil, err
	}
	b, err := openDocument(ev.DocumentB)
	if err != nil {
		return nil, err
	}
	for _, d := range []*pb.Document{a, b} {
		if d.Swarm != swarm {
			return nil, fmt.Errorf("%w: a document of swarm %q, not %q", ErrDocSwarm, d.Swarm, swarm)
		}
	}
	ia, ib := peer.ID(a.Issuer), peer.ID(b.Issuer)
	apart := time.UnixMilli(a.CreatedUnixMs).Sub(time.UnixMilli(b.CreatedUnixMs)).Abs()
	switch {
	case ia == ib && apart <= ConflictWindow && !slices.Equal(uuids(a), uuids(b)):
		return []peer.ID{ia}, nil
	case ia == ib:
		return nil, fmt.Errorf("%w: the documents of %s do not contradict each other", ErrNoEvidence, ia)
	case apart > ConflictWindow:
		return nil, fmt.Errorf("%w: the two peers' documents are %s apart; a GPU may change hands", ErrNoEvidence, apart.Round(time.Second))
	case roots == nil:
		return nil, fmt.Errorf("%w: two peers' claims are settled only by CC certificates, and no CC roots are configured", ErrEvidenceUnchecked)
	}
	keysA := ccKeys(a, roots)
	for k := range ccKeys(b, roots) {
		if keysA[k] {
			return []peer.ID{ia, ib}, nil
		}
	}
	return nil, fmt.Errorf("%w: no GPU certificate answered for both peers; a UUID two peers name proves nothing by itself", ErrNoEvidence)
}

// chainEvidence checks evidence of two blocks of one chain.
func chainEvidence(ev *pb.Evidence, swarm string) ([]peer.ID, error) {
	if len(ev.DocumentA) > 0 || len(ev.DocumentB) > 0 {
		return nil, fmt.Errorf("%w: both documents and chain blocks", ErrNoEvidence)
	}
	var a, b mpb.SignedBlock
	if market.Unmarshal(ev.BlockA, &a) != nil || market.Unmarshal(ev.BlockB, &b) != nil {
		return nil, fmt.Errorf("%w: a chain block is malformed", ErrNoEvidence)
	}
	who, _, err := chain.Prove(&a, &b, swarm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEvidence, err)
	}
	return []peer.ID{who}, nil
}

// ccKeys are the public keys (DER) of the GPU certificates whose CC
// reports in d verify against roots, over d's challenge bound to its
// issuer, at d's making.
func ccKeys(d *pb.Document, roots *x509.CertPool) map[string]bool {
	keys := map[string]bool{}
	if len(d.Nonce) == 0 {
		return keys // a standing document answers no challenge
	}
	nonce := Challenge{Swarm: d.Swarm, Challenger: peer.ID(d.Challenger), Nonce: d.Nonce}.CCNonce(peer.ID(d.Issuer))
	at := time.UnixMilli(d.CreatedUnixMs)
	for _, g := range d.Gpus {
		if len(g.CcReport) == 0 || VerifyCC(g.CcReport, g.CcCertChain, nonce, roots, at) != nil {
			continue
		}
		if certs, err := ParseCertChain(g.CcCertChain); err == nil {
			keys[string(certs[0].RawSubjectPublicKeyInfo)] = true
		}
	}
	return keys
}

// openDocument verifies a document's envelope and that its issuer signed it.
func openDocument(env []byte) (*pb.Document, error) {
	rec := &docRecord{}
	e, err := record.ConsumeTypedEnvelope(env, rec)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDocSignature, err)
	}
	issuer, err := peer.IDFromBytes(rec.doc.Issuer)
	if err != nil || !issuer.MatchesPublicKey(e.PublicKey) {
		return nil, ErrDocSigner
	}
	return rec.doc, nil
}

func uuids(d *pb.Document) []string {
	out := make([]string, 0, len(d.Gpus))
	for _, g := range d.Gpus {
		out = append(out, g.Uuid)
	}
	slices.Sort(out)
	return out
}
