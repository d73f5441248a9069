package renter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"google.golang.org/protobuf/proto"
)

// propose signs a lease for candidate c and proposes it; it returns the
// countersigned lease, or why not (a provider's refusal is a
// *market.RejectError). A provider that names a later start at which the
// lease fits (after preempting bronze leases with notice) is asked once
// more, for that start, if the bid allows it.
func (r *Renter) propose(ctx context.Context, b *pb.Bid, c market.Candidate, req api.RentRequest, inputs []*pb.Input) (*pb.CoSigned, *pb.Lease, error) {
	start := c.Start
	if now := r.Clock.Now(); now.After(start) {
		start = now
	}
	cs, l, err := r.proposeAt(ctx, b, c, req, inputs, start)
	var re *market.RejectError
	if errors.As(err, &re) {
		if later := re.EarliestStart; later.After(start) && later.UnixMilli() <= b.LatestStartUnixMs {
			cs, l, err = r.proposeAt(ctx, b, c, req, inputs, later)
		}
	}
	return cs, l, err
}

// proposeAt proposes a lease for c starting at start and stores the
// countersigned lease.
func (r *Renter) proposeAt(ctx context.Context, b *pb.Bid, c market.Candidate, req api.RentRequest, inputs []*pb.Input, start time.Time) (*pb.CoSigned, *pb.Lease, error) {
	payment, err := r.payment(ctx, b, c)
	if err != nil {
		return nil, nil, err
	}
	mounts, err := r.mounts(ctx, req.Datasets, c.Issuer)
	if err != nil {
		return nil, nil, err
	}
	l, err := market.NewLease(market.LeaseTerms{ID: NewID("lease-"), Renter: r.Id, Bid: b, Candidate: c, Start: start, Command: req.Command, Env: req.Env, Inputs: inputs, Outputs: outputsOf(req.Downloads), Datasets: mounts, Payment: payment}, r.Clock.Now(), r.Swarm.Limits())
	if err != nil {
		return nil, nil, err
	}
	cs, err := market.NewCoSigned(r.Key, market.Renter, l)
	if err != nil {
		return nil, nil, err
	}
	reply, err := r.Net.RequestLease(ctx, c.Issuer, &pb.LeaseRequest{Kind: &pb.LeaseRequest_Propose{Propose: cs}})
	switch {
	case err != nil:
		return nil, nil, err
	case reply.Lease == nil:
		return nil, nil, market.RejectOf(reply)
	case !market.SameBody(reply.Lease, cs):
		return nil, nil, errors.New("the provider countersigned other terms")
	}
	if _, err := market.OpenCoSigned[*pb.Lease](reply.Lease, market.Renter, market.Provider); err != nil {
		return nil, nil, fmt.Errorf("countersignature: %w", err)
	}
	raw, _ := proto.Marshal(reply.Lease)
	rec := &records.Lease{ID: l.Id, Role: records.Renter, State: records.Accepted, Lease: raw, EndMs: market.LeaseEnd(l).UnixMilli()}
	if err := r.Store.Put(ctx, rec, nil); err != nil {
		return nil, nil, fmt.Errorf("lease store: %w", err)
	}
	return reply.Lease, l, nil
}

// pays is what this renter's bids pay with: its wallet's settlement, or
// nil (the ledger).
func (r *Renter) pays() *pb.Settlement {
	if r.Wallet == nil {
		return nil
	}
	return r.Wallet.Pays()
}

// payment is the channel that pays a lease of bid b with candidate c,
// where b pays by channel: the live one to c's payee (opened if there is
// none), from where the last voucher this renter signed on it left it.
func (r *Renter) payment(ctx context.Context, b *pb.Bid, c market.Candidate) (*pb.LeasePayment, error) {
	if b.GetSettlement().GetKind() != pb.SettlementKind_SETTLEMENT_EVM {
		return nil, nil
	}
	s := market.Accepted(c.Offer(), b.GetSettlement())
	if r.Wallet == nil || s == nil {
		return nil, fmt.Errorf("payment: %s is not taken by offer %s, or this node has no wallet", market.ShowSettlement(b.GetSettlement()), c.OfferID())
	}
	recs, err := r.Store.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease store: %w", err)
	}
	return r.Wallet.Payment(ctx, s, func(id common.Hash) *pb.Voucher { return pay.Tip(recs, id) })
}
