package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/idlegrid/idlegrid/market"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SeqGuard remembers the highest sequence number accepted for each
// (topic kind, issuer, message ID), with the expiry of the message that
// carried it, so a message replayed with an old sequence number is
// ignored, also after a restart. A record is pruned once its message has
// expired: a replay of it is then refused as expired.
//
// The numbers live in memory, where validators check them; Flush writes
// what changed since the last flush to the datastore in one batch, so a
// burst of gossip costs one fsync rather than one per message. A node
// killed between flushes forgets the numbers of that interval; its book,
// rebuilt by sync, holds the latest offers all the same.
//
// It is safe for concurrent use (pubsub runs validators in parallel): its
// mutex guards the two maps and is held for no I/O.
type SeqGuard struct {
	store ds.Batching

	mu    sync.Mutex
	held  map[seqID]seqRecord
	dirty map[seqID]bool // changed since the last flush: put, or delete if no longer held
}

type seqID struct {
	kind   string
	issuer peer.ID
	id     string
}

type seqRecord struct {
	seq     uint64
	expires int64 // Unix ms
}

var seqPrefix = ds.NewKey("/seq")

func (k seqID) key() ds.Key {
	return seqPrefix.ChildString(k.kind).ChildString(k.issuer.String()).ChildString(market.KeyPart(k.id))
}

// OpenSeqGuard reads the numbers kept in store under /seq/.
func OpenSeqGuard(ctx context.Context, store ds.Batching) (*SeqGuard, error) {
	g := &SeqGuard{store: store, held: make(map[seqID]seqRecord), dirty: make(map[seqID]bool)}
	res, err := store.Query(ctx, query.Query{Prefix: seqPrefix.String()})
	if err != nil {
		return nil, fmt.Errorf("seq guard: %w", err)
	}
	defer res.Close()
	for e := range res.Next() {
		if e.Error != nil {
			return nil, fmt.Errorf("seq guard: %w", e.Error)
		}
		parts := strings.Split(strings.TrimPrefix(e.Key, seqPrefix.String()+"/"), "/")
		issuer, err := peer.Decode(parts[min(1, len(parts)-1)])
		if len(parts) != 3 || err != nil || len(e.Value) != 16 {
			continue // not a record this guard wrote; it ages out of nothing
		}
		id, err := url.PathUnescape(parts[2])
		if err != nil {
			continue
		}
		g.held[seqID{parts[0], issuer, id}] = seqRecord{binary.BigEndian.Uint64(e.Value), int64(binary.BigEndian.Uint64(e.Value[8:]))}
	}
	return g, nil
}

// Advance records seq (and the message's expiry, Unix ms) for the key if
// seq is higher than the one held, or equal when equalOK, and reports
// whether it did. Gossip asks for a strictly higher seq; book sync accepts
// an equal one, so a restarted node can take back the offers it held.
func (g *SeqGuard) Advance(kind string, issuer peer.ID, id string, seq uint64, expires int64, equalOK bool) bool {
	k := seqID{kind, issuer, id}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.held[k]; ok {
		if h.seq > seq || h.seq == seq && !equalOK {
			return false
		}
		if h.seq == seq {
			return true
		}
	}
	g.held[k] = seqRecord{seq, expires}
	g.dirty[k] = true
	return true
}

// Prune forgets the records of messages that expired before nowMs and
// returns how many it dropped; the next Flush deletes them from the
// datastore. Without it every bid ever seen would stay.
func (g *SeqGuard) Prune(nowMs int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, r := range g.held {
		if r.expires < nowMs {
			delete(g.held, k)
			g.dirty[k] = true
			n++
		}
	}
	return n
}

// Flush writes the records changed since the last flush in one batch. On
// failure the changes stay pending for the next.
func (g *SeqGuard) Flush(ctx context.Context) error {
	g.mu.Lock()
	if len(g.dirty) == 0 {
		g.mu.Unlock()
		return nil
	}
	puts, dels := make(map[ds.Key][]byte, len(g.dirty)), make([]ds.Key, 0)
	for k := range g.dirty {
		if r, ok := g.held[k]; ok {
			var buf [16]byte
			binary.BigEndian.PutUint64(buf[:8], r.seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(r.expires))
			puts[k.key()] = buf[:]
		} else {
			dels = append(dels, k.key())
		}
	}
	flushing := g.dirty
	g.dirty = make(map[seqID]bool)
	g.mu.Unlock()

	err := g.write(ctx, puts, dels)
	if err != nil {
		g.mu.Lock()
		for k := range flushing {
			g.dirty[k] = true
		}
		g.mu.Unlock()
	}
	return err
}

func (g *SeqGuard) write(ctx context.Context, puts map[ds.Key][]byte, dels []ds.Key) error {
	b, err := g.store.Batch(ctx)
	if err != nil {
		return fmt.Errorf("seq guard: %w", err)
	}
	for k, v := range puts {
		if err := b.Put(ctx, k, v); err != nil {
			return fmt.Errorf("seq guard: %w", err)
		}
	}
	for _, k := range dels {
		if err := b.Delete(ctx, k); err != nil {
			return fmt.Errorf("seq guard: %w", err)
		}
	}
	if err := b.Commit(ctx); err != nil {
		return fmt.Errorf("seq guard: %w", err)
	}
	return nil
}
