package lease

import (
	"context"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/jobstream"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// receiptWait bounds how long a provider waits for the renter to
// countersign a receipt; without it the provider keeps its own signature.
const receiptWait = 10 * time.Second

// finish ends the lease: a receipt metered from the last beat, signed by
// the provider, stored with the lease's final state and settled in the
// ledger in one batch; then the job is removed, the calendar released,
// and the receipt offered to the renter to countersign.
func (r *run) finish(outcome pb.Outcome, note string, exitCode int) {
	lo, ll := r.lo, r.ll
	r.unstage()
	l := ll.lease
	term := ll.term.Load()
	terms := market.ReceiptTerms{Outcome: outcome, End: lo.clock.Now(), ExitCode: int32(exitCode), Note: note, ExtensionHash: term.ExtensionHash()}
	if r.chain != nil {
		terms.Beats, terms.Root = r.chain.Beats(), r.chain.Root()
		if r.chain.Beats() > 0 {
			terms.LastBeat = r.chain.Last()
		}
	}
	if r.tab != nil {
		terms.Voucher = r.tab.Named(terms.Beats, r.sent())
	}
	rc := market.NewReceipt(term.Lease, ll.cs, terms)
	// The record first, in this provider's chain: a restart between the
	// two finds it and closes the lease on it, never on a second record.
	if lo.records != nil {
		if b, err := lo.records.Propose(context.WithoutCancel(lo.ctx), rc, ll.cs, term.Extension); err != nil {
			lo.log.Error("lease record not made", "lease", l.Id, "err", err)
		} else {
			rc = b.Receipt()
		}
	}
	rcs, err := market.NewCoSigned(lo.key, market.Provider, rc)
	if err != nil {
		lo.log.Error("receipt not signed", "lease", l.Id, "err", err)
		return
	}
	rec := ll.rec
	rec.End(rc, rcs)
	ll.stamp()
	// What the renter may not have got waits for it with the receipt,
	// until it countersigns.
	if o := ll.Feed.Undelivered(); o != nil && len(o.Stdout)+len(o.Stderr) > 0 {
		rec.Undelivered = o
	}
	if r.chain != nil {
		rec.Beats, rec.Root, rec.LastBeat = r.chain.Beats(), r.chain.Root(), r.chain.Last().UnixMilli()
	}
	if err := lo.store.Put(context.WithoutCancel(lo.ctx), rec, rc); err != nil {
		lo.log.Error("lease end not persisted", "lease", l.Id, "err", err)
	}
	if lo.ended != nil {
		lo.ended(rec, rc)
	}
	// Removed only once the end is stored: a provider killed in between
	// finds the container on restart and stops it as an orphan, where the
	// other order would leave an ended job looking lost.
	if r.job != nil {
		r.remove()
	}
	close(ll.off)
	lo.Do(context.Background(), func(st *State) {
		for _, c := range st.Cals {
			c.Release(l.Id, lo.clock.Now())
		}
		delete(st.Live, l.Id)
		lo.nLive.Add(-1)
		if rc.AmountMicros > 0 { // GPU time the renter owes for
			st.unsigned[l.Id] = unsignedReceipt{renter: peer.ID(l.Renter), end: time.UnixMilli(rec.EndMs)}
		}
	})
	lo.log.Info("lease ended", "lease", l.Id, "state", rec.State, "seconds", rc.MeteredSeconds, "amount", market.FormatPrice(rc.AmountMicros), "note", note)
	lo.collectSignature(lo.ctx, rec, ll.Feed)
}

// collectSignature sends the provider-signed receipt to the attached
// renter and keeps the renter's countersignature if it comes back, for
// the same body, within receiptWait; then it closes the feed. Until it
// is signed (now, or when the renter attaches again) the receipt counts
// against the renter's open leases for unsignedMemory after the end.
func (lo *Owner) collectSignature(ctx context.Context, rec *records.Lease, feed *jobstream.Feed) {
	defer feed.Close()
	rcs := new(pb.CoSigned)
	if err := proto.Unmarshal(rec.Receipt, rcs); err != nil {
		return
	}
	record := lo.recordOf(ctx, rcs)
	frame := &pb.JobFrame{Kind: &pb.JobFrame_Receipt{Receipt: rcs}}
	if record != nil {
		frame.Record = record.Signed
	}
	feed.Send(frame)
	if len(rcs.RenterSignature) > 0 {
		// Signed by both already: a renter that attaches for it again
		// did not keep it (it stopped between its reply and its store,
		// or a follow of it held an older record), and keeps it now.
		// Its reply, the same again, is only waited for, so that the
		// stream is not closed under it.
		select {
		case <-feed.Replies():
		case <-lo.clock.After(receiptWait):
		case <-ctx.Done():
		}
		return
	}
	signed := false
	select {
	case reply := <-feed.Replies():
		if reply.Voucher == nil {
			select { // the last beat's voucher, sent alone before the reply
			case reply.Voucher = <-feed.Vouchers():
			default:
			}
		}
		signed = lo.keepCountersigned(rec, rcs, reply)
		if signed && record != nil {
			lo.keepAgreement(ctx, record, reply.Agreement)
		}
	case <-lo.clock.After(receiptWait):
		lo.log.Info("receipt kept with the provider's signature only: the renter did not countersign", "lease", rec.ID)
	case <-ctx.Done():
	}
	if signed {
		lo.Do(context.WithoutCancel(ctx), func(st *State) { delete(st.unsigned, rec.ID) })
	}
}

// recordOf is this provider's record in its chain of the lease the
// receipt rcs closes; nil for none.
func (lo *Owner) recordOf(ctx context.Context, rcs *pb.CoSigned) *chain.Block {
	rc := new(pb.Receipt)
	if lo.records == nil || market.Unmarshal(rcs.Body, rc) != nil { // this provider's own, as stored: no signature to check again
		return nil
	}
	b, err := lo.records.Of(ctx, rc.LeaseHash)
	if err != nil {
		lo.log.Warn("lease record not found", "lease", rc.LeaseId, "err", err)
		return nil
	}
	return b
}

// keepAgreement keeps the renter's agreement that completes this
// provider's record of a lease; a renter that sent none leaves the record
// half-signed, as its chain shows.
func (lo *Owner) keepAgreement(ctx context.Context, record *chain.Block, agreement *pb.SignedBlock) {
	if agreement == nil {
		lo.log.Info("lease record left half-signed: the renter sent no agreement", "seq", record.Seq)
		return
	}
	if err := lo.records.Completed(context.WithoutCancel(ctx), record, agreement); err != nil {
		lo.log.Warn("renter's agreement refused", "seq", record.Seq, "err", err)
	}
}

// keepCountersigned stores the receipt the renter countersigned, if it
// countersigned the provider's terms, and says whether it did.
func (lo *Owner) keepCountersigned(rec *records.Lease, rcs *pb.CoSigned, reply *pb.ReceiptReply) bool {
	if reply.Receipt == nil {
		lo.log.Warn("renter refused the receipt", "lease", rec.ID, "why", reply.Refusal)
		return false
	}
	if !market.SameBody(reply.Receipt, rcs) {
		lo.log.Warn("renter countersigned other terms", "lease", rec.ID)
		return false
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](reply.Receipt, market.Renter, market.Provider)
	if err != nil {
		lo.log.Warn("renter's countersignature refused", "lease", rec.ID, "err", err)
		return false
	}
	rec.Receipt, _ = proto.Marshal(reply.Receipt)
	rec.Undelivered = nil // the renter attached for it: delivered
	lo.takeFinal(rec, reply.Voucher)
	if err := lo.store.Put(context.WithoutCancel(lo.ctx), rec, nil); err != nil {
		lo.log.Error("co-signed receipt not persisted", "lease", rec.ID, "err", err)
		return false
	}
	lo.log.Info("receipt co-signed", "lease", rec.ID, "renter", peer.ID(rc.Renter))
	if lo.signed != nil {
		lo.signed()
	}
	return true
}

// takeFinal takes into an ended lease's record the voucher the renter
// sent with its countersignature (or just before it): the one that pays
// the last beat, which the receipt names. Refused, the record keeps the
// voucher it had.
func (lo *Owner) takeFinal(rec *records.Lease, v *pb.Voucher) {
	if v == nil {
		return
	}
	l, cs, err := rec.Open()
	if err != nil || l.GetPayment() == nil {
		return
	}
	t, err := records.Term(l, cs, rec)
	if err != nil {
		return
	}
	tab, err := pay.TabOf(t.Lease, rec.Voucher)
	if err != nil || tab.Same(v) {
		return
	}
	sent := time.Duration(0)
	if rec.Beats > 0 {
		sent = pay.Metered(t.Lease, time.UnixMilli(rec.LastBeat))
	}
	if err := tab.Take(v, sent); err != nil {
		lo.log.Warn("final voucher refused", "lease", rec.ID, "err", err)
		return
	}
	rec.Voucher, _ = proto.Marshal(v)
}
