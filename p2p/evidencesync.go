package p2p

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// EvidenceSyncProtocol hands a peer the evidence this node recorded
// against offenders, so a node that joins late excludes them too: each
// piece proves by itself (attest.VerifyEvidence). The asking peer sends
// nothing and closes its side; the server answers with its evidence, each
// piece length-prefixed, then closes.
const EvidenceSyncProtocol protocol.ID = "/idlegrid/evidence/1.0.0"

// Limits of one evidence sync, served and read alike.
const (
	// MaxSyncEvidence bounds the pieces of one answer.
	MaxSyncEvidence = 1_000
	// EvidenceSyncDeadline bounds a whole exchange, either side.
	EvidenceSyncDeadline = 30 * time.Second
)

// EvidenceLimits bound the evidence-sync server like book sync's: one at
// a time per peer, three in a row, then one each ten seconds.
var EvidenceLimits = StreamLimits{
	Service: "idlegrid.evidence", Memory: attest.MaxEvidenceSize + AnswerBuffer,
	Request: requestDeadline, Deadline: EvidenceSyncDeadline, PerPeer: 1, Rate: Rate{0.1, 3},
}

// ServeEvidence answers EvidenceSyncProtocol with what source returns.
func ServeEvidence(sv Server, source func(context.Context) ([][]byte, error)) {
	sv.Serve(EvidenceSyncProtocol, EvidenceLimits, func(ctx context.Context, _ peer.ID, s network.Stream) error {
		if _, err := io.Copy(io.Discard, io.LimitReader(s, 1)); err != nil { // the request is empty
			return fmt.Errorf("evidence request: %w", err)
		}
		evs, err := source(ctx)
		if err != nil {
			return err
		}
		return writeAnswer(s, func(w msgio.Writer) error {
			for _, ev := range evs[:min(len(evs), MaxSyncEvidence)] {
				if len(ev) > attest.MaxEvidenceSize {
					continue
				}
				if err := w.WriteMsg(ev); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// FetchEvidence asks p for its evidence and calls each with every piece
// as it arrives, unverified: the caller verifies each as it would a
// gossiped one. It reads at most MaxSyncEvidence pieces of at most
// attest.MaxEvidenceSize bytes.
func FetchEvidence(ctx context.Context, h host.Host, sw Swarm, p peer.ID, each func([]byte)) (int, error) {
	n, err := exchange(ctx, h, sw, p, EvidenceSyncProtocol, EvidenceSyncDeadline, nil, func(r io.Reader) (int, error) {
		return readCapped(r, attest.MaxEvidenceSize, MaxSyncEvidence, 0, "pieces of evidence", each)
	})
	if err != nil {
		return n, fmt.Errorf("evidence sync with %s: %w", p, err)
	}
	return n, nil
}
