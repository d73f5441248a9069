package p2p

import (
	"context"
	"encoding/binary"
	"errors"
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
// (market/chain), whole from any seq: the asking peer sends a ChainQuery
// (the first seq it wants, the most blocks it will take, both unsigned
// varints, and optionally a counterparty: a varint length and its peer
// ID); the server answers with its blocks from that seq on, in order,
// each length-prefixed (protobuf ChainEntry: the block, and the
// counterparty's block beside it when the server holds one), then
// closes. Unfiltered, none is left out: the asker checks every signature
// and link (chain.Verify), and a chain served with a block missing or
// rewritten shows it. Seq 0 asks for the newest blocks; a counterparty
// asks only for the blocks of leases with it (each checked on its own:
// what a filtered answer leaves out cannot be seen).
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
	Service: "idlegrid.chain", Memory: MaxChainEntrySize + AnswerBuffer,
	Request: requestDeadline, Deadline: ChainDeadline, PerPeer: 2, Rate: Rate{2, 20},
}

// ChainQuery is what a chain request asks for: blocks from seq From on
// (0: the newest), at most Want, and with About set only those of leases
// with that peer.
type ChainQuery struct {
	From  uint64
	Want  int
	About peer.ID
}

// ChainSource returns this node's chain as q asks, at most
// min(q.Want, MaxChainReply) entries (marshalled ChainEntry), in order.
type ChainSource func(ctx context.Context, q ChainQuery) ([][]byte, error)

// ServeChain answers ChainProtocol with what source returns.
func ServeChain(sv Server, source ChainSource) {
	sv.Serve(ChainProtocol, ChainLimits, func(ctx context.Context, _ peer.ID, s network.Stream) error {
		q, err := readChainRequest(s)
		if err != nil {
			return fmt.Errorf("chain request: %w", err)
		}
		entries, err := source(ctx, q)
		if err != nil {
			return err
		}
		return writeAnswer(s, func(w msgio.Writer) error {
			sent := 0
			for _, e := range entries {
				// An entry past a cap ends the answer: what follows it
				// would look like a gap.
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
	})
}

// readChainRequest reads a ChainQuery, Want capped at MaxChainReply; a
// request that ends after Want asks about no one.
func readChainRequest(r io.Reader) (ChainQuery, error) {
	br := byteReader{r}
	from, err := binary.ReadUvarint(br)
	if err != nil {
		return ChainQuery{}, err
	}
	want, err := binary.ReadUvarint(br)
	if err != nil {
		return ChainQuery{}, err
	}
	q := ChainQuery{From: from, Want: int(min(want, MaxChainReply))}
	switch about, err := readPeerID(r, true); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return ChainQuery{}, fmt.Errorf("about: %w", err)
	default:
		q.About = about
	}
	return q, nil
}

// FetchChain asks p for its chain as q asks (Want 0 or past
// MaxChainReply: MaxChainReply) and calls each with every entry as it
// arrives, unverified: the caller checks the blocks (chain.Verify, or
// chain.Open for a filtered answer). It reads at most MaxChainReply
// entries of at most MaxChainEntrySize bytes each, MaxChainBytes in all.
func FetchChain(ctx context.Context, h host.Host, sw Swarm, p peer.ID, q ChainQuery, each func([]byte)) (int, error) {
	want := q.Want
	if want <= 0 || want > MaxChainReply {
		want = MaxChainReply
	}
	req := binary.AppendUvarint(nil, q.From)
	req = binary.AppendUvarint(req, uint64(want))
	if q.About != "" {
		req = appendPeerID(req, q.About)
	}
	n, err := exchange(ctx, h, sw, p, ChainProtocol, ChainDeadline, req, func(r io.Reader) (int, error) {
		return readCapped(r, MaxChainEntrySize, want, MaxChainBytes, "chain entries", each)
	})
	if err != nil {
		return n, fmt.Errorf("chain of %s: %w", p, err)
	}
	return n, nil
}
