package p2p

import (
	"context"
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
// without waiting for every provider to re-publish.
const BookSyncProtocol protocol.ID = "/idlegrid/book/1.0.0"

// Limits of one book sync.
const (
	// MaxSyncOffers bounds how many envelopes one sync carries.
	MaxSyncOffers = 200_000
	// SyncDeadline bounds a whole sync, either side.
	SyncDeadline = time.Minute
)

// BookSource returns the signed envelopes of the offers to hand out.
type BookSource func() [][]byte

// ServeBookSync answers BookSyncProtocol on h with what source returns:
// each envelope length-prefixed (unsigned varint), then the stream closes.
func ServeBookSync(h host.Host, source BookSource) {
	h.SetStreamHandler(BookSyncProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(SyncDeadline))
		w := msgio.NewVarintWriter(s)
		envs := source()
		if len(envs) > MaxSyncOffers {
			envs = envs[:MaxSyncOffers]
		}
		for _, env := range envs {
			if err := w.WriteMsg(env); err != nil {
				s.Reset()
				return
			}
		}
	})
}

// FetchBook asks p for its book and calls each with every envelope as it
// arrives, unverified: the caller verifies each as it would a gossiped one.
// It reads at most MaxSyncOffers envelopes of at most market.MaxEnvelopeSize
// bytes each, so a hostile peer cannot make it allocate without bound.
func FetchBook(ctx context.Context, h host.Host, p peer.ID, each func([]byte)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, SyncDeadline)
	defer cancel()
	s, err := h.NewStream(ctx, p, BookSyncProtocol)
	if err != nil {
		return 0, fmt.Errorf("book sync with %s: %w", p, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	s.CloseWrite()
	r := msgio.NewVarintReaderSize(s, market.MaxEnvelopeSize)
	n := 0
	for ; n < MaxSyncOffers; n++ {
		msg, err := r.ReadMsg()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			s.Reset()
			return n, fmt.Errorf("book sync with %s: %w", p, err)
		}
		each(msg)
	}
	s.Reset()
	return n, fmt.Errorf("book sync with %s: more than %d offers", p, MaxSyncOffers)
}
