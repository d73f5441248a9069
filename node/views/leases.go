package views

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Lease states (see records): a lease is accepted (countersigned, not
// yet running), active (its job runs), settling (its renter's provider
// was gone), or ended in one of the others.
const (
	LeaseAccepted  = records.Accepted
	LeaseActive    = records.Active
	LeaseSettling  = records.Settling
	LeaseCompleted = records.Completed
	LeasePreempted = records.Preempted
	LeaseFailed    = records.Failed
	LeaseCancelled = records.Cancelled
)

// Lease shows a lease record.
func Lease(r *records.Lease) api.LeaseView {
	v := api.LeaseView{ID: r.ID, Role: r.Role, State: r.State, Ended: records.Ended(r.State), Assigned: r.GPUs, Beats: r.Beats, Note: r.Note, End: time.UnixMilli(r.EndMs).UTC()}
	if r.SettleByMs > 0 {
		v.SettleBy = time.UnixMilli(r.SettleByMs).UTC()
	}
	l, cs, err := r.Open()
	if err != nil {
		v.Note = "unreadable lease: " + err.Error()
		return v
	}
	v.Renter, v.Provider = peer.ID(l.Renter).String(), peer.ID(l.Provider).String()
	v.Tier, v.GPUs, v.Price, v.Currency = market.TierName(l.Tier), l.GpuCount, market.FormatPrice(l.PriceMicros), l.Currency
	v.Start, v.Image = time.UnixMilli(l.StartUnixMs).UTC(), l.Workload.GetImage()
	v.Metered, v.Cost = metered(r, l, cs)
	if len(r.Voucher) > 0 {
		pv := new(pb.Voucher)
		if proto.Unmarshal(r.Voucher, pv) == nil {
			v.Voucher = voucherView(pv)
		}
	}
	return v
}

// metered is what lease l of record r bills: its receipt's seconds and
// amount once it has one, else what market.Meter, which the receipt
// is built with, makes of the term and the last beat verified so far.
func metered(r *records.Lease, l *pb.Lease, cs *pb.CoSigned) (seconds uint64, amount string) {
	if rc, _, err := r.OpenReceipt(); err == nil && rc != nil {
		return rc.MeteredSeconds, market.FormatPrice(rc.AmountMicros)
	}
	var micros uint64
	if r.LastBeat > 0 {
		term, _ := records.Term(l, cs, r) // a bad extension leaves the signed term
		seconds, micros = market.Meter(term.Lease, time.UnixMilli(r.LastBeat))
	}
	return seconds, market.FormatPrice(micros)
}

// voucherView shows a voucher.
func voucherView(pv *pb.Voucher) *api.VoucherView {
	return &api.VoucherView{Channel: "0x" + hex.EncodeToString(pv.Channel), Amount: new(big.Int).SetBytes(pv.Amount).String(), Nonce: pv.Nonce}
}

// Receipt shows a receipt and which signatures on it verify.
func Receipt(rc *pb.Receipt, cs *pb.CoSigned) api.ReceiptView {
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
	if pv := rc.GetVoucher(); pv != nil {
		v.Voucher = voucherView(pv)
	}
	return v
}

func Leases(ctx context.Context, s records.Store) ([]api.LeaseView, error) {
	recs, err := s.All(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.LeaseView{}
	for _, r := range recs {
		out = append(out, Lease(r))
	}
	return out, nil
}

func Receipts(ctx context.Context, s records.Store) ([]api.ReceiptView, error) {
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
			out = append(out, Receipt(rc, cs))
		}
	}
	return out, nil
}

func Ledger(ctx context.Context, s records.Store) ([]api.LedgerEntry, error) {
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
