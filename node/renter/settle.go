package renter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// SettleFor is how long a renter whose provider was gone keeps the lease
// settling: the provider back within it (a restart, a network outage)
// settles the lease with the renter, one receipt and one record both
// sign; past it, the renter's own receipt stands.
const SettleFor = 15 * time.Minute

// SettleEvery is how often the renter tries to reach the providers of
// its settling leases.
const SettleEvery = 20 * time.Second

// errNotBack: a settling lease's provider was not reached.
var errNotBack = errors.New("the provider is not back")

// settleLoop tries at once, and then every SettleEvery, to settle the
// leases this renter holds settling (their provider was gone), and to
// close the ones it holds open that their providers ended (see
// closeEndedThere), until ctx ends: a rent that left one so and exited
// has it settled by the next node of its repository (the daemon, another
// rent).
func (r *Renter) settleLoop(ctx context.Context) {
	t := r.Clock.NewTicker(SettleEvery)
	defer t.Stop()
	for first := true; ; first = false {
		// Not at the start: a node started for one command (attach,
		// cancel, exec) follows its lease itself; listings ask SettleNow.
		if !first {
			r.closeEndedThere(ctx)
		}
		r.settleAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// settleAll tries once to settle each settling lease that no follow
// holds: attached again, the lease is cancelled (the renter gave it up)
// and ends with the provider's receipt, checked and countersigned, and
// the renter's agreement to the provider's record, as a followed lease
// ends; a provider not reached by the lease's SettleByMs leaves the
// renter's own receipt standing.
func (r *Renter) settleAll(ctx context.Context) {
	// A settling follow cancels the lease as soon as it is attached.
	gaveUp, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	r.followStored(ctx, "settling", func(rec *records.Lease) bool { return rec.State == records.Settling }, func(f *Follow, rec *records.Lease) error {
		f.settling = true
		err := f.run(gaveUp)
		if errors.Is(err, errNotBack) && !r.Clock.Now().Before(time.UnixMilli(rec.SettleByMs)) {
			err = f.settleAlone()
		}
		if errors.Is(err, errNotBack) {
			return nil
		}
		return err
	})
}

// SettleNow tries once, now, to settle each lease this renter holds
// settling, and to close each it holds open that its provider has ended
// (see closeEndedThere), and waits until each attempt is over, its own or
// a follow's this node had begun (ctx bounds the wait): the two sides
// then keep one receipt both signed.
func (r *Renter) SettleNow(ctx context.Context) {
	done, err := r.use()
	if err != nil {
		return
	}
	defer done()
	over := r.closeEndedThere(ctx)
	r.settleAll(ctx)
	for {
		recs, err := r.Store.All(ctx)
		if err != nil {
			return
		}
		busy := false
		r.mu.Lock()
		for _, rec := range recs {
			busy = busy || rec.Role == records.Renter && (rec.State == records.Settling || over[rec.ID]) && r.following[rec.ID] != nil
		}
		r.mu.Unlock()
		if !busy {
			return
		}
		select {
		case <-r.Clock.After(50 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// askWait bounds the question to a provider whether it runs a lease
// still: a dial and one small exchange, on a busy machine.
const askWait = 10 * time.Second

// closeEndedThere follows to its receipt each lease this renter holds
// open (a rent killed, or detached, left it so) whose provider says it
// runs it no more: the provider keeps the receipt of a lease it ended
// without its renter for the renter's next attach, which countersigns
// it. A lease still running there is left alone ('idlegrid attach'
// follows it), and so is one whose provider is not reached, and one
// with outputs to download (rent --download), which attach downloads. It returns
// the leases found over there; one a follow of this node holds already
// (resumed at its start) is that follow's to close.
func (r *Renter) closeEndedThere(ctx context.Context) map[string]bool {
	over := map[string]bool{}
	r.followStored(ctx, "closing", func(rec *records.Lease) bool {
		if records.Ended(rec.State) || rec.State == records.Settling || len(rec.Downloads) > 0 {
			return false // a lease with outputs to download is its attach's to end, which downloads them
		}
		l, _, err := rec.Open()
		if err != nil {
			return false
		}
		pctx, cancel := context.WithTimeout(ctx, askWait)
		reply, err := r.Net.RequestLease(pctx, peer.ID(l.Provider), &pb.LeaseRequest{Kind: &pb.LeaseRequest_TermsLeaseId{TermsLeaseId: rec.ID}})
		cancel()
		over[rec.ID] = err == nil && reply.Lease == nil && market.RejectOf(reply).Code == pb.RejectCode_REJECT_UNKNOWN_LEASE
		r.mu.Lock()
		followed := r.following[rec.ID] != nil
		r.mu.Unlock()
		return over[rec.ID] && !followed // a follow that has it sees the end itself
	}, func(f *Follow, _ *records.Lease) error {
		f.detachOnCancel = true // over there: nothing to cancel
		return f.run(ctx)
	})
	return over
}

// settle checks the provider's receipt against what this renter verified:
// the lease, the telemetry chain's root and beats, and the amount metered
// from the last verified beat. Agreed, it countersigns and sends it back,
// with its agreement to the provider's record of it (record) in its
// chain; otherwise it refuses and keeps a receipt, and a record, of its
// own.
func (f *Follow) settle(s network.Stream, rcs *pb.CoSigned, record *pb.SignedBlock) error {
	rc, err := market.OpenCoSigned[*pb.Receipt](rcs, market.Provider)
	if err == nil {
		err = f.check(rc)
	}
	if err != nil {
		p2p.WriteMsg(s, &pb.ReceiptReply{Refusal: err.Error()})
		s.Close()
		f.out.say("receipt refused: %v", err)
		return f.own(rc.GetOutcome(), "refused the provider's receipt: "+err.Error())
	}
	if err := market.CoSign[*pb.Receipt](f.R.Key, market.Renter, rcs); err != nil {
		return err
	}
	reply := &pb.ReceiptReply{Receipt: rcs, Voucher: f.voucher()}
	if f.R.Records != nil && record != nil {
		if a, err := f.R.Records.Agree(context.Background(), record, rcs.Body); err != nil {
			f.R.Log.Warn("provider's lease record not agreed to", "lease", f.Lease.Id, "err", err)
		} else {
			reply.Agreement = a.Signed
		}
	}
	if err := p2p.WriteMsg(s, reply); err != nil {
		f.out.say("countersigned receipt not delivered: %v", err)
	}
	// Close, never reset, a stream with the countersignature in it: a
	// reset may drop it before the provider reads it.
	s.Close()
	return f.store(rc, rcs)
}

// check compares a receipt with the one this renter makes from its own
// view of the lease and its verified telemetry, on the provider's stated
// outcome, end, exit code and note: the same builder, so the same bytes.
func (f *Follow) check(rc *pb.Receipt) error {
	mine := market.NewReceipt(f.Lease, f.cs, market.ReceiptTerms{Outcome: rc.Outcome, End: time.UnixMilli(rc.EndUnixMs),
		Beats: f.beats.Beats(), Root: f.beats.Root(), LastBeat: f.last(), ExitCode: rc.ExitCode, Note: rc.Note, ExtensionHash: f.tm.ExtensionHash(), Voucher: f.named()})
	switch {
	case rc.LeaseId != mine.LeaseId || !bytes.Equal(rc.LeaseHash, mine.LeaseHash):
		return errors.New("the receipt names another lease")
	case !bytes.Equal(rc.Renter, mine.Renter) || !bytes.Equal(rc.Provider, mine.Provider):
		return errors.New("the receipt names other parties")
	case !bytes.Equal(rc.ExtensionHash, mine.ExtensionHash):
		return fmt.Errorf("term: the receipt names extension %x, the last one seen here is %x", rc.ExtensionHash, mine.ExtensionHash)
	case rc.Beats != mine.Beats || !bytes.Equal(rc.TelemetryRoot, mine.TelemetryRoot):
		return fmt.Errorf("telemetry: the receipt says %d beats, %d verified here", rc.Beats, mine.Beats)
	case rc.MeteredSeconds != mine.MeteredSeconds || rc.AmountMicros != mine.AmountMicros || rc.Currency != mine.Currency:
		return fmt.Errorf("amount: the receipt says %d s for %s, verified here %d s for %s", rc.MeteredSeconds, market.FormatPrice(rc.AmountMicros), mine.MeteredSeconds, market.FormatPrice(mine.AmountMicros))
	case !proto.Equal(rc.Voucher, mine.Voucher):
		return fmt.Errorf("voucher: the receipt names amount %x at nonce %d, the last beat verified here is paid by %x at nonce %d", rc.GetVoucher().GetAmount(), rc.GetVoucher().GetNonce(), mine.GetVoucher().GetAmount(), mine.GetVoucher().GetNonce())
	case !proto.Equal(rc, mine):
		return errors.New("the receipt's terms differ from the lease's")
	}
	return nil
}

// last is when the last verified beat was taken (zero with none).
func (f *Follow) last() time.Time {
	if f.beats.Beats() == 0 {
		return time.Time{}
	}
	return f.beats.Last()
}

// providerGone ends the follow without the provider: the renter makes
// a receipt of its own, for the time its verified beats cover, and keeps
// the lease settling. Should the provider be back by the lease's
// SettleByMs (SettleFor from the first time it was gone), the settler
// attaches again and the lease ends with one receipt and one record
// both sides sign; otherwise this receipt stands, in a record of the
// renter's own.
func (f *Follow) providerGone(why, note string) error {
	by := f.R.Clock.Now().Add(SettleFor)
	if f.rec.SettleByMs > 0 {
		by = time.UnixMilli(f.rec.SettleByMs)
	}
	f.out.say("%s; paying only for verified telemetry, unless the provider is back by %s to settle the lease", why, by.UTC().Format(time.RFC3339))
	rc := f.ownReceipt(pb.Outcome_OUTCOME_FAILED, note)
	rcs, err := market.NewCoSigned(f.R.Key, market.Renter, rc)
	if err != nil {
		return err
	}
	raw, err := proto.Marshal(rc)
	if err != nil {
		return err
	}
	f.rec.State, f.rec.Note, f.rec.Provisional, f.rec.SettleByMs = records.Settling, rc.Note, raw, by.UnixMilli()
	f.rec.Beats, f.rec.Root, f.rec.LastBeat = f.beats.Beats(), f.beats.Root(), f.last().UnixMilli()
	f.receipt, f.amount = views.Receipt(rc, rcs), rc.AmountMicros
	return f.R.Store.Put(context.Background(), f.rec, nil)
}

// settleAlone ends a settling lease whose provider did not come back in
// time with the receipt the renter made when it was gone.
func (f *Follow) settleAlone() error {
	rc := new(pb.Receipt)
	if err := proto.Unmarshal(f.rec.Provisional, rc); err != nil {
		return fmt.Errorf("lease %s: provisional receipt: %w", f.Lease.Id, err)
	}
	f.out.say("the provider was not back by %s: the renter's own receipt stands", time.UnixMilli(f.rec.SettleByMs).UTC().Format(time.RFC3339))
	return f.closeAlone(rc)
}

// own records a receipt signed by the renter alone.
func (f *Follow) own(outcome pb.Outcome, note string) error {
	return f.closeAlone(f.ownReceipt(outcome, note))
}

// ownReceipt is the receipt this renter makes of the lease, for the
// beats it verified, ending now.
func (f *Follow) ownReceipt(outcome pb.Outcome, note string) *pb.Receipt {
	return market.NewReceipt(f.Lease, f.cs, market.ReceiptTerms{Outcome: outcome, End: f.R.Clock.Now(),
		Beats: f.beats.Beats(), Root: f.beats.Root(), LastBeat: f.last(), ExitCode: -1, Note: note, ExtensionHash: f.tm.ExtensionHash(), Voucher: f.named()})
}

// closeAlone ends the lease with rc, signed by the renter alone, and
// recorded in its chain.
func (f *Follow) closeAlone(rc *pb.Receipt) error {
	if f.R.Records != nil {
		// The record first, in this renter's chain, as the provider's own
		// is made: a lease gets one record of this renter's.
		if b, err := f.R.Records.Propose(context.Background(), rc, f.cs, f.tm.Extension); err != nil {
			f.R.Log.Warn("lease record not made", "lease", f.Lease.Id, "err", err)
		} else {
			rc = b.Receipt()
		}
	}
	rcs, err := market.NewCoSigned(f.R.Key, market.Renter, rc)
	if err != nil {
		return err
	}
	return f.store(rc, rcs)
}

// store records the lease's end and settles the receipt in one batch.
func (f *Follow) store(rc *pb.Receipt, rcs *pb.CoSigned) error {
	f.rec.End(rc, rcs)
	f.rec.Beats, f.rec.Root, f.rec.LastBeat = f.beats.Beats(), f.beats.Root(), f.last().UnixMilli()
	f.receipt, f.amount = views.Receipt(rc, rcs), rc.AmountMicros
	if err := f.R.Store.Put(context.Background(), f.rec, rc); err != nil {
		return err
	}
	if f.R.Ended != nil {
		f.R.Ended(f.rec, rc)
	}
	return nil
}
