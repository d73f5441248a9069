package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// ReceiptsProtocol hands a peer the co-signed receipts this node holds
// that name one peer (as provider or renter), so a renter that never
// dealt with a provider can learn its history: anyone can check both
// signatures. The asking peer sends the subject's peer ID (length-
// prefixed) and the most receipts it will take (an unsigned varint); the
// server answers with at most that many, newest first, each length-
// prefixed (protobuf CoSigned), then closes.
const ReceiptsProtocol protocol.ID = "/idlegrid/receipts/1.0.0"

// Limits of one receipts exchange, served and read alike.
const (
	// MaxReceiptsReply bounds the receipts of one answer.
	MaxReceiptsReply = 256
	// MaxReceiptSize bounds one co-signed receipt's bytes.
	MaxReceiptSize = 4 << 10
	// ReceiptsDeadline bounds a whole exchange, either side.
	ReceiptsDeadline = 10 * time.Second
)

// ReceiptLimits bound the receipts server: a few exchanges at once per
// peer, a burst of 20 and then 2 a second.
var ReceiptLimits = StreamLimits{
	Service: "idlegrid.receipts", Memory: MaxReceiptSize + AnswerBuffer,
	Request: requestDeadline, Deadline: ReceiptsDeadline, PerPeer: 2, Rate: Rate{2, 20},
}

// ReceiptSource returns the co-signed receipts (marshalled CoSigned)
// that name subject, newest first.
type ReceiptSource func(ctx context.Context, subject peer.ID) ([][]byte, error)

// ServeReceipts answers ReceiptsProtocol with what source returns.
func ServeReceipts(sv Server, source ReceiptSource) {
	sv.Serve(ReceiptsProtocol, ReceiptLimits, func(ctx context.Context, _ peer.ID, s network.Stream) error {
		subject, want, err := readReceiptsRequest(s)
		if err != nil {
			return fmt.Errorf("receipts request: %w", err)
		}
		rcs, err := source(ctx, subject)
		if err != nil {
			return err
		}
		return writeAnswer(s, func(w msgio.Writer) error {
			for _, rc := range rcs[:min(uint64(len(rcs)), want, MaxReceiptsReply)] {
				if len(rc) > MaxReceiptSize {
					continue
				}
				if err := w.WriteMsg(rc); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// readReceiptsRequest reads a subject and a count, refusing a subject
// that is not a peer ID.
func readReceiptsRequest(r io.Reader) (peer.ID, uint64, error) {
	subject, err := readPeerID(r, false)
	if err != nil {
		return "", 0, fmt.Errorf("subject: %w", err)
	}
	want, err := binary.ReadUvarint(byteReader{r})
	return subject, want, err
}

// readPeerID reads a peer ID as a request carries it: its length (an
// unsigned varint, at most 128) and its bytes. With none, a length of 0
// is "" rather than an error.
func readPeerID(r io.Reader, none bool) (peer.ID, error) {
	n, err := binary.ReadUvarint(byteReader{r})
	switch {
	case err != nil:
		return "", err
	case n == 0 && none:
		return "", nil
	case n == 0 || n > 128:
		return "", fmt.Errorf("peer ID of %d bytes", n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return "", err
	}
	return peer.IDFromBytes(raw)
}

// appendPeerID appends p as readPeerID reads it.
func appendPeerID(b []byte, p peer.ID) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

// FetchReceipts asks p for the receipts it holds that name subject and
// calls each with every one as it arrives, unverified: the caller checks
// both signatures. It reads at most MaxReceiptsReply receipts of at most
// MaxReceiptSize bytes each.
func FetchReceipts(ctx context.Context, h host.Host, sw Swarm, p, subject peer.ID, each func([]byte)) (int, error) {
	req := appendPeerID(nil, subject)
	req = binary.AppendUvarint(req, MaxReceiptsReply)
	n, err := exchange(ctx, h, sw, p, ReceiptsProtocol, ReceiptsDeadline, req, func(r io.Reader) (int, error) {
		return readReceipts(r, each)
	})
	if err != nil {
		return n, fmt.Errorf("receipts from %s: %w", p, err)
	}
	return n, nil
}

// readReceipts reads a receipts answer from r, calling each with every
// receipt: at most MaxReceiptsReply of at most MaxReceiptSize bytes.
func readReceipts(r io.Reader, each func([]byte)) (int, error) {
	return readCapped(r, MaxReceiptSize, MaxReceiptsReply, 0, "receipts", each)
}
