package records

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

var (
	leasePrefix   = ds.NewKey("/leases")
	receiptPrefix = ds.NewKey("/receipts")
	ledgerPrefix  = ds.NewKey("/ledger")
)

// leaseKey is where a lease's record is kept: its ID escaped, so an ID
// such as ".." cannot collapse into another key.
func leaseKey(id string) ds.Key { return leasePrefix.ChildString(market.KeyPart(id)) }

// Settlement settles the receipts of ended leases: a chain, a payment
// channel or a swarm's credit ledger could. It writes what it records into
// the batch that stores the receipt, so the receipt and its settlement are
// stored together or not at all; work outside the datastore should be
// queued there and done after.
type Settlement interface {
	Settle(ctx context.Context, batch ds.Batch, role string, r *pb.Receipt) error
}

// Store persists lease records and receipts, and settles receipts through
// its settlement (the local ledger when nil).
type Store struct {
	D      ds.Batching
	Settle Settlement
	Clock  clock.Clock // stamps Updated; nil: the system clock
}

func (s Store) settlement() Settlement {
	if s.Settle == nil {
		return localLedger{s.D}
	}
	return s.Settle
}

// ErrEnded refuses to keep, over the record of a lease that ended, one
// that says it has not: an end, with its receipt, is final.
var ErrEnded = errors.New("the lease has ended; a record of it still open is not kept")

// putLocks serialise, per lease, Put's check of the record it replaces
// and its write, among all the Stores of a process (one process holds a
// repository).
var putLocks [64]sync.Mutex

func putLock(id string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &putLocks[h.Sum32()%uint32(len(putLocks))]
}

// Put writes r and, when it holds one, its receipt; with settle it also
// settles that receipt (once per lease and side), all in one batch. A
// record not ended is refused (ErrEnded) where the stored one has ended:
// a writer that held an older copy of the record (a follow of the lease
// that another one ended meanwhile) never undoes the end.
func (s Store) Put(ctx context.Context, r *Lease, settle *pb.Receipt) error {
	mu := putLock(r.ID)
	mu.Lock()
	defer mu.Unlock()
	if !Ended(r.State) {
		// A record not read (none, or unreadable) is replaced.
		if old, err := s.Get(ctx, r.ID); err == nil && Ended(old.State) {
			return fmt.Errorf("lease %s (%s): %w", r.ID, old.State, ErrEnded)
		}
	}
	r.Updated = clock.Or(s.Clock).Now().UnixMilli()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	batch, err := s.D.Batch(ctx)
	if err != nil {
		return err
	}
	if err := batch.Put(ctx, leaseKey(r.ID), b); err != nil {
		return err
	}
	if len(r.Receipt) > 0 {
		if err := batch.Put(ctx, receiptPrefix.ChildString(market.KeyPart(r.ID)), r.Receipt); err != nil {
			return err
		}
	}
	if settle != nil {
		if err := s.settlement().Settle(ctx, batch, r.Role, settle); err != nil {
			return err
		}
	}
	return batch.Commit(ctx)
}

// Get reads one lease record; ds.ErrNotFound if there is none.
func (s Store) Get(ctx context.Context, id string) (*Lease, error) {
	b, err := s.D.Get(ctx, leaseKey(id))
	if err != nil {
		return nil, err
	}
	r := new(Lease)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("lease record %s: %w", id, err)
	}
	return r, nil
}

// All reads every lease record, oldest update first.
func (s Store) All(ctx context.Context) ([]*Lease, error) {
	res, err := s.D.Query(ctx, query.Query{Prefix: leasePrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var out []*Lease
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		r := new(Lease)
		if err := json.Unmarshal(e.Value, r); err != nil {
			return nil, fmt.Errorf("lease record %s: %w", e.Key, err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Lease) int { return int(a.Updated - b.Updated) })
	return out, nil
}

// LedgerEntry is the local ledger's balance with one counterparty, in
// micro-units of one currency: positive when it owes this node.
type LedgerEntry struct {
	Peer     string `json:"peer"`
	Currency string `json:"currency"`
	Balance  int64  `json:"balance_micros"`
	Receipts int    `json:"receipts"`
}

// Ledger reads every ledger entry.
func (s Store) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	res, err := s.D.Query(ctx, query.Query{Prefix: ledgerPrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	out := []LedgerEntry{}
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		var l LedgerEntry
		if err := json.Unmarshal(e.Value, &l); err != nil {
			return nil, fmt.Errorf("ledger entry %s: %w", e.Key, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// localLedger is the default settlement: a balance per counterparty and
// currency in the node's own datastore.
type localLedger struct{ d ds.Datastore }

// Settle records the receipt in the ledger: the provider is owed the
// receipt's amount, the renter owes it.
func (s localLedger) Settle(ctx context.Context, batch ds.Batch, role string, rc *pb.Receipt) error {
	other, sign := peer.ID(rc.Renter), int64(1)
	if role == Renter {
		other, sign = peer.ID(rc.Provider), -1
	}
	key := ledgerPrefix.ChildString(other.String() + ":" + rc.Currency)
	e := LedgerEntry{Peer: other.String(), Currency: rc.Currency}
	switch b, err := s.d.Get(ctx, key); {
	case errors.Is(err, ds.ErrNotFound):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("ledger entry %s: %w", key, err)
		}
	}
	e.Balance += sign * int64(min(rc.AmountMicros, 1<<62))
	e.Receipts++
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return batch.Put(ctx, key, b)
}

func unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

func marshal(m proto.Message) []byte {
	b, _ := proto.Marshal(m) // a CoSigned of bytes fields always marshals
	return b
}
