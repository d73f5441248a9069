package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SeqGuard remembers the highest sequence number accepted for each
// (topic kind, issuer, message ID) and persists it, so a message replayed
// with an old sequence number is ignored, also after a restart. It is
// safe for concurrent use: pubsub runs validators in parallel.
type SeqGuard struct {
	mu    sync.Mutex
	store ds.Datastore
}

// NewSeqGuard keeps its numbers in store under /seq/.
func NewSeqGuard(store ds.Datastore) *SeqGuard { return &SeqGuard{store: store} }

func seqKey(kind string, issuer peer.ID, id string) ds.Key {
	return ds.KeyWithNamespaces([]string{"seq", kind, issuer.String(), id})
}

// Advance records seq for the key if it is higher than the one held and
// reports whether it was; an equal or lower seq changes nothing.
func (g *SeqGuard) Advance(ctx context.Context, kind string, issuer peer.ID, id string, seq uint64) (bool, error) {
	k := seqKey(kind, issuer, id)
	g.mu.Lock()
	defer g.mu.Unlock()
	held, err := g.store.Get(ctx, k)
	switch {
	case errors.Is(err, ds.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("seq guard: %w", err)
	case len(held) == 8 && binary.BigEndian.Uint64(held) >= seq:
		return false, nil
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], seq)
	if err := g.store.Put(ctx, k, buf[:]); err != nil {
		return false, fmt.Errorf("seq guard: %w", err)
	}
	return true, nil
}
