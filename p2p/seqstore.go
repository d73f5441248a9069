package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SeqGuard remembers the highest sequence number accepted for each
// (topic kind, issuer, message ID), with the expiry of the message that
// carried it, and persists both, so a message replayed with an old
// sequence number is ignored, also after a restart. A record is pruned
// once its message has expired: a replay of it is then refused as expired.
// It is safe for concurrent use: pubsub runs validators in parallel.
type SeqGuard struct {
	mu    sync.Mutex
	store ds.Datastore
}

// NewSeqGuard keeps its numbers in store under /seq/.
func NewSeqGuard(store ds.Datastore) *SeqGuard { return &SeqGuard{store: store} }

var seqPrefix = ds.NewKey("/seq")

func seqKey(kind string, issuer peer.ID, id string) ds.Key {
	return seqPrefix.ChildString(kind).ChildString(issuer.String()).ChildString(id)
}

// Advance records seq (and the message's expiry, Unix ms) for the key if
// seq is higher than the one held, or equal when equalOK, and reports
// whether it did. Gossip asks for a strictly higher seq; book sync accepts
// an equal one, so a restarted node can take back the offers it held.
func (g *SeqGuard) Advance(ctx context.Context, kind string, issuer peer.ID, id string, seq uint64, expires int64, equalOK bool) (bool, error) {
	k := seqKey(kind, issuer, id)
	g.mu.Lock()
	defer g.mu.Unlock()
	held, err := g.store.Get(ctx, k)
	switch {
	case errors.Is(err, ds.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("seq guard: %w", err)
	case len(held) == 16:
		h := binary.BigEndian.Uint64(held)
		if h > seq || h == seq && !equalOK {
			return false, nil
		}
		if h == seq {
			return true, nil
		}
	}
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], seq)
	binary.BigEndian.PutUint64(buf[8:], uint64(expires))
	if err := g.store.Put(ctx, k, buf[:]); err != nil {
		return false, fmt.Errorf("seq guard: %w", err)
	}
	return true, nil
}

// Prune forgets the records of messages that expired before nowMs and
// returns how many it dropped; without it every bid ever seen would stay.
func (g *SeqGuard) Prune(ctx context.Context, nowMs int64) (int, error) {
	res, err := g.store.Query(ctx, query.Query{Prefix: seqPrefix.String()})
	if err != nil {
		return 0, fmt.Errorf("seq guard: %w", err)
	}
	var stale []ds.Key
	for e := range res.Next() {
		if e.Error != nil {
			res.Close()
			return 0, fmt.Errorf("seq guard: %w", e.Error)
		}
		if len(e.Value) != 16 || int64(binary.BigEndian.Uint64(e.Value[8:])) < nowMs {
			stale = append(stale, ds.NewKey(e.Key))
		}
	}
	res.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range stale {
		if err := g.store.Delete(ctx, k); err != nil {
			return 0, fmt.Errorf("seq guard: %w", err)
		}
	}
	return len(stale), nil
}
