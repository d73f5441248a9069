package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Lease states. A lease is accepted (countersigned, not yet running),
// active (its job runs), or ended in one of the terminal states.
const (
	LeaseAccepted  = "accepted"
	LeaseActive    = "active"
	LeaseCompleted = "completed"
	LeasePreempted = "preempted"
	LeaseFailed    = "failed"
	LeaseCancelled = "cancelled"
)

// LeaseEnded reports whether a lease in state s is over.
func LeaseEnded(s string) bool {
	return s == LeaseCompleted || s == LeasePreempted || s == LeaseFailed || s == LeaseCancelled
}

// stateOf maps a receipt's outcome to the lease state it ends in.
func stateOf(o pb.Outcome) string {
	switch o {
	case pb.Outcome_OUTCOME_COMPLETED:
		return LeaseCompleted
	case pb.Outcome_OUTCOME_PREEMPTED:
		return LeasePreempted
	case pb.Outcome_OUTCOME_CANCELLED:
		return LeaseCancelled
	}
	return LeaseFailed
}

// leaseRecord is what a node keeps of one lease, on either side. It is
// written whole, in one batch with the receipt and the ledger entry it
// settles, so a killed node restarts with all of it or none.
type leaseRecord struct {
	ID    string `json:"id"`
	Role  string `json:"role"` // "provider" or "renter"
	State string `json:"state"`
	// Lease is the co-signed lease (protobuf CoSigned).
	Lease []byte `json:"lease"`
	// GPUs are the calendar slots (GPU UUIDs) the provider assigned.
	GPUs []string `json:"gpus,omitempty"`
	Job  string   `json:"job,omitempty"` // executor's job ID
	// Telemetry chain so far: beats signed (provider) or accepted
	// (renter), the last beat's hash and time.
	Beats    uint64 `json:"beats"`
	Root     []byte `json:"root,omitempty"`
	LastBeat int64  `json:"last_beat_ms,omitempty"`
	// LastEnv is the provider's last signed beat, replayed to a renter
	// that attaches after a restart, so it has verified what the receipt
	// counts even when it missed beats while the provider was down.
	LastEnv []byte `json:"last_beat_env,omitempty"`
	// End is when the lease must be off the GPUs (moved earlier by a
	// preemption or a cancellation).
	EndMs int64 `json:"end_ms"`
	// A stop ahead with notice (a preemption): its outcome and note, so a
	// restarted provider ends the lease the way it was told.
	StopOutcome int32  `json:"stop_outcome,omitempty"`
	StopNote    string `json:"stop_note,omitempty"`
	Receipt     []byte `json:"receipt,omitempty"` // co-signed receipt, once ended
	Note        string `json:"note,omitempty"`
	Updated     int64  `json:"updated_ms"`
}

var (
	leasePrefix  = ds.NewKey("/leases")
	receiptKeyNS = ds.NewKey("/receipts")
	ledgerPrefix = ds.NewKey("/ledger")
)

// lease decodes the record's co-signed lease.
func (r *leaseRecord) lease() (*pb.Lease, *pb.CoSigned, error) {
	cs := new(pb.CoSigned)
	if err := proto.Unmarshal(r.Lease, cs); err != nil {
		return nil, nil, err
	}
	l, err := market.OpenCoSigned[*pb.Lease](cs)
	return l, cs, err
}

// ledgerEntry is the local ledger's balance with one counterparty, in
// micro-units of one currency: positive when it owes this node.
type ledgerEntry struct {
	Peer     string `json:"peer"`
	Currency string `json:"currency"`
	Balance  int64  `json:"balance_micros"`
	Receipts int    `json:"receipts"`
}

// Settlement settles the receipts of ended leases: a chain, a payment
// channel or a swarm's credit ledger could. It writes what it records into
// the batch that stores the receipt, so the receipt and its settlement are
// stored together or not at all; work outside the datastore should be
// queued there and done after.
type Settlement interface {
	Settle(ctx context.Context, batch ds.Batch, role string, r *pb.Receipt) error
}

// localLedger is the default settlement: a balance per counterparty and
// currency in the node's own datastore.
type localLedger struct{ d ds.Datastore }

// leaseStore persists lease records and receipts, and settles receipts
// through its settlement (the local ledger when nil).
type leaseStore struct {
	d      ds.Batching
	settle Settlement
}

func (s leaseStore) settlement() Settlement {
	if s.settle == nil {
		return localLedger{s.d}
	}
	return s.settle
}

// leaseStore is the node's store of leases, settling through
// Options.Settlement (default: the local ledger).
func (n *Node) leaseStore() leaseStore { return leaseStore{d: n.store, settle: n.opts.Settlement} }

// ended counts a lease's end in the node's metrics.
func (n *Node) ended(rec *leaseRecord, rc *pb.Receipt) {
	if n.metrics == nil {
		return
	}
	n.metrics.leasesEnded.WithLabelValues(rec.Role, rec.State).Inc()
	n.metrics.leaseSeconds.WithLabelValues(rec.Role).Add(float64(rc.MeteredSeconds))
}

// put writes r and, when it holds one, its receipt; with settle it also
// settles that receipt in the ledger (once per lease and side), all in
// one batch.
func (s leaseStore) put(ctx context.Context, r *leaseRecord, settle *pb.Receipt) error {
	r.Updated = time.Now().UnixMilli()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	batch, err := s.d.Batch(ctx)
	if err != nil {
		return err
	}
	if err := batch.Put(ctx, leasePrefix.ChildString(r.ID), b); err != nil {
		return err
	}
	if len(r.Receipt) > 0 {
		if err := batch.Put(ctx, receiptKeyNS.ChildString(r.ID), r.Receipt); err != nil {
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

// Settle records the receipt in the ledger: the provider is owed the
// receipt's amount, the renter owes it.
func (s localLedger) Settle(ctx context.Context, batch ds.Batch, role string, rc *pb.Receipt) error {
	other, sign := peer.ID(rc.Renter), int64(1)
	if role == "renter" {
		other, sign = peer.ID(rc.Provider), -1
	}
	key := ledgerPrefix.ChildString(other.String() + ":" + rc.Currency)
	e := ledgerEntry{Peer: other.String(), Currency: rc.Currency}
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

// get reads one lease record; ds.ErrNotFound if there is none.
func (s leaseStore) get(ctx context.Context, id string) (*leaseRecord, error) {
	b, err := s.d.Get(ctx, leasePrefix.ChildString(id))
	if err != nil {
		return nil, err
	}
	r := new(leaseRecord)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("lease record %s: %w", id, err)
	}
	return r, nil
}

// all reads every lease record, oldest update first.
func (s leaseStore) all(ctx context.Context) ([]*leaseRecord, error) {
	res, err := s.d.Query(ctx, query.Query{Prefix: leasePrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var out []*leaseRecord
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		r := new(leaseRecord)
		if err := json.Unmarshal(e.Value, r); err != nil {
			return nil, fmt.Errorf("lease record %s: %w", e.Key, err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *leaseRecord) int { return int(a.Updated - b.Updated) })
	return out, nil
}

// ledger reads every ledger entry.
func (s leaseStore) ledger(ctx context.Context) ([]ledgerEntry, error) {
	res, err := s.d.Query(ctx, query.Query{Prefix: ledgerPrefix.String()})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	out := []ledgerEntry{}
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		var l ledgerEntry
		if err := json.Unmarshal(e.Value, &l); err != nil {
			return nil, fmt.Errorf("ledger entry %s: %w", e.Key, err)
		}
		out = append(out, l)
	}
	return out, nil
}
