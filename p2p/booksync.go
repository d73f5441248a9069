package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// BookSyncProtocol hands a newly met peer the signed offers this node
// holds, so a node that joins late (or a light client) has the whole book
// without waiting for every provider to re-publish. The asking peer sends
// the most envelopes it will take (an unsigned varint); the server answers
// with at most that many, each length-prefixed, then closes.
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const BookSyncProtocol protocol.ID = "/idlegrid/book/1.1.0"

// Limits of one book sync, served and read alike.
const (
	// MaxSyncOffers bounds how many envelopes one sync carries.
	MaxSyncOffers = 20_000
	// MaxSyncBytes bounds the envelopes' bytes in one sync.
	MaxSyncBytes = 16 << 20
	// SyncDeadline bounds a whole sync, either side.
	SyncDeadline = time.Minute
)

// BookLimits bound the book-sync server: a whole book per request, so a
// peer gets one at a time, and three in a row, then one each ten seconds.
var BookLimits = StreamLimits{
	Service: "idlegrid.book", Memory: market.MaxEnvelopeSize,
	Request: requestDeadline, Deadline: SyncDeadline, PerPeer: 1, Rate: Rate{0.1, 3},
}

// BookSource returns the signed envelopes of the offers to hand out.
type BookSource func(ctx context.Context) ([][]byte, error)

// ServeBookSync answers BookSyncProtocol with what source returns, within
// the bytes a peer and all peers may take of it (SyncOutRates).
func ServeBookSync(sv Server, source BookSource) {
	out := newSyncOut(SyncOutRates)
	sv.Serve(BookSyncProtocol, BookLimits, func(ctx context.Context, p peer.ID, s network.Stream) error {
		want, err := binary.ReadUvarint(byteReader{s})
		if err != nil {
			return fmt.Errorf("book sync request: %w", err)
		}
		if !out.ready(p, time.Now()) {
			return nil // nothing to spare now: the peer asks another, or again later
		}
		envs, err := source(ctx)
		if err != nil {
			return err
		}
		envs = envs[:min(uint64(len(envs)), want, MaxSyncOffers)]
		w := msgio.NewVarintWriter(s)
		sent := 0
		for _, env := range envs {
			if sent += len(env); sent > MaxSyncBytes {
				return nil // what fits: the rest comes by gossip or the next sync
			}
			if !out.take(p, len(env), time.Now()) {
				return nil // the byte budget is spent: the rest another time
			}
			if err := w.WriteMsg(env); err != nil {
				return err
			}
		}
		return nil
	})
}

// FetchBook asks p for its book and calls each with every envelope as it
// arrives, unverified: the caller verifies each as it would a gossiped one.
// It reads at most MaxSyncOffers envelopes of at most market.MaxEnvelopeSize
// bytes each, MaxSyncBytes in all, so a hostile peer cannot make it
// allocate, or work, without bound.
func FetchBook(ctx context.Context, h host.Host, sw Swarm, p peer.ID, each func([]byte)) (int, error) {
	n, err := exchange(ctx, h, sw, p, BookSyncProtocol, SyncDeadline, binary.AppendUvarint(nil, MaxSyncOffers), func(r io.Reader) (int, error) {
		return readBook(r, each)
	})
	if err != nil {
		return n, fmt.Errorf("book sync with %s: %w", p, err)
	}
	return n, nil
}

// readBook reads a book-sync answer from r, calling each with every
// envelope: at most MaxSyncOffers of at most market.MaxEnvelopeSize bytes
// each, MaxSyncBytes in all; an answer with more is an error.
func readBook(r io.Reader, each func([]byte)) (int, error) {
	return readCapped(r, market.MaxEnvelopeSize, MaxSyncOffers, MaxSyncBytes, "offers", each)
}

// exchange dials p on protocol id, sends req, closes its side and reads
// the answer with read, all within deadline and ctx: a peer that stalls,
// or a connection that died without a word (a killed peer's QUIC), is
// cut off at either, and a stream read fails on is reset.
func exchange(ctx context.Context, h host.Host, sw Swarm, p peer.ID, id protocol.ID, deadline time.Duration, req []byte, read func(io.Reader) (int, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	s, err := dial(ctx, h, sw, p, id)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	defer context.AfterFunc(ctx, func() { s.Reset() })()
	// An empty request is no write at all: the answer may already be on
	// its way, its server done reading, and a write would meet its
	// STOP_SENDING.
	if len(req) > 0 {
		if _, err := s.Write(req); err != nil {
			s.Reset()
			return 0, err
		}
	}
	s.CloseWrite()
	n, err := read(s)
	if err != nil {
		s.Reset()
	}
	return n, err
}

// readCapped reads length-prefixed messages from r until it ends, calling
// each with every one: at most maxCount of at most maxSize bytes each, and
// maxBytes in all (0: no bound). An answer with more is an error, and
// what more it held is not read.
func readCapped(r io.Reader, maxSize, maxCount, maxBytes int, what string, each func([]byte)) (int, error) {
	mr := msgio.NewVarintReaderSize(r, maxSize)
	n, read := 0, 0
	for {
		msg, err := mr.ReadMsg()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if n == maxCount {
			return n, fmt.Errorf("more than %d %s", maxCount, what)
		}
		if read += len(msg); maxBytes > 0 && read > maxBytes {
			return n, fmt.Errorf("more than %d bytes", maxBytes)
		}
		each(msg)
		n++
	}
}

// byteReader reads a stream one byte at a time, for a varint that must
// not read past itself.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	_, err := io.ReadFull(b.r, one[:])
	return one[0], err
}
