package node

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// leaseView shows a lease record.
func leaseView(r *leaseRecord) api.LeaseView {
	v := api.LeaseView{ID: r.ID, Role: r.Role, State: r.State, Assigned: r.GPUs, Beats: r.Beats, Note: r.Note, End: time.UnixMilli(r.EndMs).UTC()}
	l, _, err := r.lease()
	if err != nil {
		v.Note = "unreadable lease: " + err.Error()
		return v
	}
	v.Renter, v.Provider = peer.ID(l.Renter).String(), peer.ID(l.Provider).String()
	v.Tier, v.GPUs, v.Price, v.Currency = market.TierName(l.Tier), l.GpuCount, FormatPrice(l.PriceMicros), l.Currency
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
		Amount: FormatPrice(rc.AmountMicros), Currency: rc.Currency, ExitCode: rc.ExitCode, Note: rc.Note, SignedBy: []string{},
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
	recs, err := (leaseStore{n.store}).all(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.LeaseView{}
	for _, r := range recs {
		out = append(out, leaseView(r))
	}
	return out, nil
}

// Receipts lists every receipt this node holds.
func (n *Node) Receipts(ctx context.Context) ([]api.ReceiptView, error) {
	recs, err := (leaseStore{n.store}).all(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.ReceiptView{}
	for _, r := range recs {
		if len(r.Receipt) == 0 {
			continue
		}
		cs := new(pb.CoSigned)
		if err := proto.Unmarshal(r.Receipt, cs); err != nil {
			return nil, fmt.Errorf("receipt of %s: %w", r.ID, err)
		}
		rc, err := market.OpenCoSigned[*pb.Receipt](cs)
		if err != nil {
			return nil, fmt.Errorf("receipt of %s: %w", r.ID, err)
		}
		out = append(out, receiptView(rc, cs))
	}
	return out, nil
}

// Ledger lists the local ledger's balances.
func (n *Node) Ledger(ctx context.Context) ([]api.LedgerEntry, error) {
	es, err := (leaseStore{n.store}).ledger(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.LedgerEntry{}
	for _, e := range es {
		bal := FormatPrice(uint64(max(e.Balance, -e.Balance)))
		if e.Balance < 0 {
			bal = "-" + bal
		}
		out = append(out, api.LedgerEntry{Peer: e.Peer, Currency: e.Currency, Balance: bal, Receipts: e.Receipts})
	}
	return out, nil
}
