package attest

import (
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
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

// VerifyEvidence checks evidence and returns the offenders it proves:
//   - two peers attesting one GPU UUID: both are named, since either may
//     be the one lying;
//   - one peer signing documents within ConflictWindow of each other that
//     list different GPUs: that peer.
//
// Both documents must verify as signed by their issuers. Anything else is
// an error wrapping ErrNoEvidence or ErrDocSignature.
func VerifyEvidence(data []byte) ([]peer.ID, error) {
	if len(data) > MaxEvidenceSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrNoEvidence, len(data), MaxEvidenceSize)
	}
	var ev pb.Evidence
	if err := market.Unmarshal(data, &ev); err != nil || ev.Version != 1 {
		return nil, fmt.Errorf("%w: malformed", ErrNoEvidence)
	}
	a, err := openDocument(ev.DocumentA)
	if err != nil {
		return nil, err
	}
	b, err := openDocument(ev.DocumentB)
	if err != nil {
		return nil, err
	}
	ia, ib := peer.ID(a.Issuer), peer.ID(b.Issuer)
	if ia != ib {
		if shared := sharedUUID(a, b); shared != "" {
			return []peer.ID{ia, ib}, nil
		}
		return nil, fmt.Errorf("%w: the two peers attest no GPU in common", ErrNoEvidence)
	}
	apart := time.UnixMilli(a.CreatedUnixMs).Sub(time.UnixMilli(b.CreatedUnixMs)).Abs()
	if apart <= ConflictWindow && !slices.Equal(uuids(a), uuids(b)) {
		return []peer.ID{ia}, nil
	}
	return nil, fmt.Errorf("%w: the documents of %s do not contradict each other", ErrNoEvidence, ia)
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

func sharedUUID(a, b *pb.Document) string {
	in := map[string]bool{}
	for _, g := range a.Gpus {
		in[g.Uuid] = true
	}
	for _, g := range b.Gpus {
		if in[g.Uuid] {
			return g.Uuid
		}
	}
	return ""
}
