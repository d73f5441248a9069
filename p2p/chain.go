package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// ChainProtocol hands a peer this node's chain of lease records
// (market/chain), whole from any seq: the asking peer sends the first
// seq it wants and the most blocks it will take (unsigned varints); the
// server answers with its blocks from that seq on, in order, none left
// out, each length-prefixed (protobuf ChainEntry: the block, and the
// counterparty's block beside it when the server holds one), then
// closes. The asker checks every signature and link (chain.Verify): a
// chain served with a block missing or rewritten shows it.
const ChainProtocol protocol.ID = "/idlegrid/chain/1.0.0"

// Limits of one chain exchange, served and read alike.
const (
	// MaxChainReply bounds the entries of one answer; a longer chain is
	// read in several.
	MaxChainReply = 64
	// MaxChainEntrySize bounds one entry: two blocks.
	MaxChainEntrySize = 2*chain.MaxBlockSize + 64
	// MaxChainBytes bounds one answer's bytes.
	MaxChainBytes = 1 << 20
	// ChainDeadline bounds a whole exchange, either side.
	ChainDeadline = 10 * time.Second
)

// ChainLimits bound the chain server: a few exchanges at once per peer,
// a burst of 20 and then 2 a second.
var ChainLimits = StreamLimits{
	Service: "idlegrid.chain", Memory: MaxChainEntrySize,
	Request: requestDeadline, Deadline: ChainDeadline, PerPeer: 2, Rate: Rate{2, 20},
}

// ChainSource returns this node's chain from seq from on, at most limit
// entries (marshalled ChainEntry), in order.
type ChainSource func(ctx context.Context, from uint64, limit int) ([][]byte, error)

// ServeChain answers ChainProtocol with what source returns.
func ServeChain(sv Server, source ChainSource) {
	sv.Serve(ChainProtocol, ChainLimits, func(ctx context.Context, _ peer.ID, s network.Stream) error {
		from, want, err := readChainRequest(s)
		if err != nil {
			return fmt.Errorf("chain request: %w", err)
		}
		entries, err := source(ctx, from, int(min(want, MaxChainReply)))
		if err != nil {
			return err
		}
		w, sent := msgio.NewVarintWriter(s), 0
		for _, e := range entries {
			// An entry past a cap ends the answer: what follows it would
			// look like a gap.
			if len(e) > MaxChainEntrySize || sent+len(e) > MaxChainBytes {
				return nil
			}
			if err := w.WriteMsg(e); err != nil {
				return err
			}
			sent += len(e)
		}
		return nil
	})
}

// readChainRequest reads the first seq asked and the most entries taken.
func readChainRequest(r io.Reader) (from, want uint64, err error) {
	br := byteReader{r}
	if from, err = binary.ReadUvarint(br); err != nil {
		return 0, 0, err
	}
	want, err = binary.ReadUvarint(br)
	return from, want, err
}

// FetchChain asks p for its chain from seq from on and calls each with
// every entry as it arrives, unverified: the caller checks the blocks
// (chain.Verify). It reads at most MaxChainReply entries of at most
// MaxChainEntrySize bytes each, MaxChainBytes in all.
func FetchChain(ctx context.Context, h host.Host, sw Swarm, p peer.ID, from uint64, each func([]byte)) (int, error) {
	req := binary.AppendUvarint(nil, from)
	req = binary.AppendUvarint(req, MaxChainReply)
	n, err := exchange(ctx, h, sw, p, ChainProtocol, ChainDeadline, req, func(r io.Reader) (int, error) {
		return readCapped(r, MaxChainEntrySize, MaxChainReply, MaxChainBytes, "chain entries", each)
	})
	if err != nil {
		return n, fmt.Errorf("chain of %s: %w", p, err)
	}
	return n, nil
}
