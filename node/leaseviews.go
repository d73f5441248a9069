package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/records"
	ds "github.com/ipfs/go-datastore"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Lease states (see records): a lease is accepted (countersigned, not
// yet running), active (its job runs), or ended in one of the others.
const (
	LeaseAccepted  = records.Accepted
	LeaseActive    = records.Active
	LeaseCompleted = records.Completed
	LeasePreempted = records.Preempted
	LeaseFailed    = records.Failed
	LeaseCancelled = records.Cancelled
)

// LeaseEnded reports whether a lease in state s is over.
func LeaseEnded(s string) bool { return records.Ended(s) }

// leaseView shows a lease record.
func leaseView(r *records.Lease) api.LeaseView {
	v := api.LeaseView{ID: r.ID, Role: r.Role, State: r.State, Ended: records.Ended(r.State), Assigned: r.GPUs, Beats: r.Beats, Note: r.Note, End: time.UnixMilli(r.EndMs).UTC()}
	l, _, err := r.Open()
	if err != nil {
		v.Note = "unreadable lease: " + err.Error()
		return v
	}
	v.Renter, v.Provider = peer.ID(l.Renter).String(), peer.ID(l.Provider).String()
	v.Tier, v.GPUs, v.Price, v.Currency = market.TierName(l.Tier), l.GpuCount, market.FormatPrice(l.PriceMicros), l.Currency
	v.Start, v.Image = time.UnixMilli(l.StartUnixMs).UTC(), l.Workload.GetImage()
	return v
}

// receiptView shows a receipt and which signatures on it verify.
func receiptView(rc *pb.Receipt, cs *pb.CoSigned) api.ReceiptView {
	v := api.ReceiptView{
		LeaseID: rc.LeaseId, Outcome: strings.ToLower(strings.TrimPrefix(rc.Outcome.String(), "OUTCOME_")),
		Renter: peer.ID(rc.Renter).String(), Provider: peer.ID(rc.Provider).String(),
		Start: time.UnixMilli(rc.StartUnixMs).UTC(), End: time.UnixMilli(rc.EndUnixMs).UTC(),
		MeteredSeconds: rc.MeteredSeconds, Beats: rc.Beats, TelemetryRoot: hex.EncodeToString(rc.TelemetryRoot),
		Amount: market.FormatPrice(rc.AmountMicros), Currency: rc.Currency, ExitCode: rc.ExitCode, Note: rc.Note, SignedBy: []string{},
		Extension: hex.EncodeToString(rc.ExtensionHash),
	}
	for _, p := range []market.Party{market.Renter, market.Provider} {
		if _, err := market.OpenCoSigned[*pb.Receipt](cs, p); err == nil {
			v.SignedBy = append(v.SignedBy, p.String())
		}
	}
	return v
}

// Leases lists every lease this node took part in, newest last.
func (n *Node) Leases(ctx context.Context) ([]api.LeaseView, error) {
	return leaseViews(ctx, n.leaseStore())
}

// Receipts lists every receipt this node holds.
func (n *Node) Receipts(ctx context.Context) ([]api.ReceiptView, error) {
	return receiptViews(ctx, n.leaseStore())
}

// Ledger lists the local ledger's balances.
func (n *Node) Ledger(ctx context.Context) ([]api.LedgerEntry, error) {
	return ledgerViews(ctx, n.leaseStore())
}

func leaseViews(ctx context.Context, s records.Store) ([]api.LeaseView, error) {
	recs, err := s.All(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.LeaseView{}
	for _, r := range recs {
		out = append(out, leaseView(r))
	}
	return out, nil
}

func receiptViews(ctx context.Context, s records.Store) ([]api.ReceiptView, error) {
	recs, err := s.All(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.ReceiptView{}
	for _, r := range recs {
		rc, cs, err := r.OpenReceipt()
		if err != nil {
			return nil, fmt.Errorf("receipt of %s: %w", r.ID, err)
		}
		if rc != nil {
			out = append(out, receiptView(rc, cs))
		}
	}
	return out, nil
}

func ledgerViews(ctx context.Context, s records.Store) ([]api.LedgerEntry, error) {
	es, err := s.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.LedgerEntry{}
	for _, e := range es {
		bal := market.FormatPrice(uint64(max(e.Balance, -e.Balance)))
		if e.Balance < 0 {
			bal = "-" + bal
		}
		out = append(out, api.LedgerEntry{Peer: e.Peer, Currency: e.Currency, Balance: bal, Receipts: e.Receipts})
	}
	return out, nil
}

// Records reads a repository's leases, receipts and ledger while no
// daemon runs: it holds the repository's lock until Close.
type Records struct {
	store  *pebbleds.Datastore
	unlock func()
}

// OpenRecords locks r and opens its datastore.
func OpenRecords(r *Repo) (*Records, error) {
	unlock, err := r.Lock()
	if err != nil {
		return nil, err
	}
	store, err := pebbleds.NewDatastore(r.DatastorePath())
	if err != nil {
		unlock()
		return nil, fmt.Errorf("open datastore %s: %w", r.DatastorePath(), err)
	}
	return &Records{store: store, unlock: unlock}, nil
}

// Leases lists the repository's leases.
func (r *Records) Leases(ctx context.Context) ([]api.LeaseView, error) {
	return leaseViews(ctx, records.Store{D: r.store})
}

// Receipts lists the repository's receipts.
func (r *Records) Receipts(ctx context.Context) ([]api.ReceiptView, error) {
	return receiptViews(ctx, records.Store{D: r.store})
}

// Ledger lists the repository's ledger.
func (r *Records) Ledger(ctx context.Context) ([]api.LedgerEntry, error) {
	return ledgerViews(ctx, records.Store{D: r.store})
}

// Close closes the datastore and releases the lock.
func (r *Records) Close() error {
	err := r.store.Close()
	r.unlock()
	return err
}

// CancelLease ends a lease early. A renter's lease is cancelled at its
// provider, which stops the job and sends the receipt to the renter
// following it; a provider's lease is stopped here.
func (n *Node) CancelLease(ctx context.Context, id string) (api.LeaseView, error) {
	rec, err := n.leaseStore().Get(ctx, id)
	if errors.Is(err, ds.ErrNotFound) {
		return api.LeaseView{}, api.BadRequest{Err: fmt.Errorf("no lease %q here", id)}
	}
	if err != nil {
		return api.LeaseView{}, err
	}
	if LeaseEnded(rec.State) {
		return api.LeaseView{}, api.BadRequest{Err: fmt.Errorf("lease %s already ended: %s", id, rec.State)}
	}
	l, _, err := rec.Open()
	if err != nil {
		return api.LeaseView{}, err
	}
	if rec.Role == records.Provider {
		if n.leases == nil || n.leases.stopLease(ctx, id, "cancelled by the provider", "") == nil {
			return api.LeaseView{}, fmt.Errorf("lease %s is not running here", id)
		}
		return leaseView(rec), nil
	}
	provider := peer.ID(l.Provider)
	if err := n.link.Locate(ctx, provider); err != nil {
		return api.LeaseView{}, err
	}
	reply, err := n.link.RequestLease(ctx, provider, &pb.LeaseRequest{Kind: &pb.LeaseRequest_CancelLeaseId{CancelLeaseId: id}})
	if err != nil {
		return api.LeaseView{}, err
	}
	if reply.Lease == nil {
		return api.LeaseView{}, fmt.Errorf("provider refused: %w", market.RejectOf(reply))
	}
	return leaseView(rec), nil
}
