package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// LogsDir is the repository folder where a renter keeps its jobs' output,
// <lease>.stdout and <lease>.stderr.
const LogsDir = "logs"

// reattachFor is how long a renter keeps trying to re-attach to a job
// whose stream broke before it counts the provider as gone.
const reattachFor = 10 * time.Second

// reattachEvery is the pause between attempts to re-attach.
const reattachEvery = 500 * time.Millisecond

// beatSkew is how far a telemetry beat's stamp may lie past the lease's
// term or ahead of the renter's clock: the clocks of two machines differ.
const beatSkew = 30 * time.Second

// follow is a renter following its leased job to the receipt.
type follow struct {
	r        *renter
	lease    *pb.Lease
	cs       *pb.CoSigned
	out      RentOutput
	accepted time.Time

	beats       *attest.Follower
	rec         *records.Lease
	receipt     api.ReceiptView
	amount      uint64 // the receipt's, in micros
	firstOutput time.Time
	// relayed: the last job stream ran over a relayed connection.
	relayed    bool
	cancelOnce sync.Once
	// mistimedSeen: a beat stamped out of time was counted already.
	mistimedSeen bool
	stdout       io.Writer // the caller's, and the kept log
	stderr       io.Writer
}

// keepLogs tees the job's output into the repository's logs folder; a
// folder that cannot be written costs the copy, not the rental.
func (f *follow) keepLogs() (closeLogs func()) {
	f.stdout, f.stderr = cmp.Or[io.Writer](f.out.Stdout, io.Discard), cmp.Or[io.Writer](f.out.Stderr, io.Discard)
	if err := os.MkdirAll(f.r.logsDir, 0o700); err != nil {
		f.r.log.Warn("job output not kept", "err", err)
		return func() {}
	}
	f.noteProvider()
	var files []*os.File
	for _, w := range []*io.Writer{&f.stdout, &f.stderr} {
		name := f.lease.Id + ".stdout"
		if w == &f.stderr {
			name = f.lease.Id + ".stderr"
		}
		file, err := os.OpenFile(filepath.Join(f.r.logsDir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			f.r.log.Warn("job output not kept", "err", err)
			continue
		}
		files = append(files, file)
		*w = io.MultiWriter(*w, file)
	}
	return func() {
		for _, file := range files {
			file.Close()
		}
	}
}

// run attaches to the job and reads its frames until the receipt; a
// broken stream is re-attached, and a provider gone for reattachFor
// leaves the renter with a receipt of its own for what it verified.
func (f *follow) run(ctx context.Context) error {
	provider := peer.ID(f.lease.Provider)
	if f.rec == nil {
		raw, _ := proto.Marshal(f.cs)
		f.rec = &records.Lease{ID: f.lease.Id, Role: records.Renter, State: records.Active, Lease: raw, EndMs: market.LeaseEnd(f.lease).UnixMilli()}
		f.beats = attest.NewFollower(provider, f.r.swarm.Tag(), f.lease.Id, f.term())
	} else {
		f.beats = attest.ResumeFollower(provider, f.r.swarm.Tag(), f.lease.Id, f.term(), f.rec.Beats, f.rec.Root, time.UnixMilli(f.rec.LastBeat))
	}
	defer f.keepLogs()()
	clk := f.r.clock
	lost := time.Time{}
	for {
		// The link attaches past the swarm's dial backoff (5 s and more
		// after a failed dial), which would keep a provider back from a
		// restart unreachable for most of reattachFor.
		s, err := f.r.net.AttachJob(context.WithoutCancel(ctx), provider, f.lease.Id)
		if err == nil {
			lost = time.Time{}
			f.relayed = s.Conn().Stat().Limited
			if done, err := f.read(ctx, s); done {
				return err
			}
		}
		if f.r.ctx.Err() != nil {
			f.persist()
			return ErrClosed
		}
		if lost.IsZero() {
			lost = clk.Now()
			f.out.say("lost the job stream; re-attaching for up to %s", reattachFor)
		} else {
			find, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			f.r.net.Relocate(find, provider) // it may be back on another address
			cancel()
		}
		if clk.Since(lost) > reattachFor {
			return f.providerGone()
		}
		if ctx.Err() != nil {
			f.cancel()
		}
		select { // back off before re-attaching
		case <-clk.After(reattachEvery):
		case <-f.r.ctx.Done():
		}
	}
}

// read handles one attached stream's frames; done when the lease ended
// here (receipt handled) or failed for good.
func (f *follow) read(ctx context.Context, s network.Stream) (done bool, err error) {
	defer func() {
		if !done {
			s.Reset()
		}
	}()
	stop := context.AfterFunc(ctx, func() { f.cancel() })
	defer stop()
	closing := context.AfterFunc(f.r.ctx, func() { s.Reset() })
	defer closing()
	for {
		fr := new(pb.JobFrame)
		if err := p2p.ReadMsg(s, p2p.MaxJobFrame, fr); err != nil {
			return false, err
		}
		switch k := fr.Kind.(type) {
		case *pb.JobFrame_Stdout:
			f.output()
			f.stdout.Write(k.Stdout)
		case *pb.JobFrame_Stderr:
			f.output()
			f.stderr.Write(k.Stderr)
		case *pb.JobFrame_Heartbeat:
			if err := f.beats.Add(k.Heartbeat); err != nil {
				f.out.say("telemetry beat refused: %v", err)
				f.mistimed(err)
			} else if f.beats.Beats()%10 == 1 {
				f.persist()
			}
		case *pb.JobFrame_Notice:
			f.out.say("provider: %s", k.Notice)
		case *pb.JobFrame_Started:
			f.out.say("job started: %s", k.Started)
		case *pb.JobFrame_Receipt:
			return true, f.settle(s, k.Receipt)
		}
	}
}

// term is when the lease's beats may be stamped: within its term and
// never ahead of this renter's clock, give or take beatSkew.
func (f *follow) term() attest.Term {
	return attest.Term{Start: time.UnixMilli(f.lease.StartUnixMs), End: market.LeaseEnd(f.lease), Now: f.r.clock.Now, Skew: beatSkew}
}

// mistimed counts a beat the provider stamped out of time against it, as
// a failed lease, once a lease: its signature proves the provider sent it.
func (f *follow) mistimed(err error) {
	if !errors.Is(err, attest.ErrBeatTime) || f.mistimedSeen || f.r.observe == nil {
		return
	}
	f.mistimedSeen = true
	f.r.observe(peer.ID(f.lease.Provider), false, weightMistimed, "lease "+f.lease.Id+": "+err.Error())
}

func (f *follow) output() {
	if f.firstOutput.IsZero() {
		f.firstOutput = f.r.clock.Now()
	}
}

// cancel asks the provider to end the lease now; the receipt follows on
// the job stream.
func (f *follow) cancel() { f.cancelOnce.Do(f.sendCancel) }

func (f *follow) sendCancel() {
	f.out.say("cancelling lease %s; waiting for the receipt", f.lease.Id)
	ctx, done := context.WithTimeout(context.Background(), cancelWait)
	defer done()
	reply, err := f.r.net.RequestLease(ctx, peer.ID(f.lease.Provider), &pb.LeaseRequest{Kind: &pb.LeaseRequest_CancelLeaseId{CancelLeaseId: f.lease.Id}})
	if err != nil || reply.Lease == nil {
		f.out.say("cancel not confirmed: %v%s", err, reply.GetReason())
	}
}

// settle checks the provider's receipt against what this renter verified:
// the lease, the telemetry chain's root and beats, and the amount metered
// from the last verified beat. Agreed, it countersigns and sends it back;
// otherwise it refuses and keeps a receipt of its own.
func (f *follow) settle(s network.Stream, rcs *pb.CoSigned) error {
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
	if err := market.CoSign[*pb.Receipt](f.r.key, market.Renter, rcs); err != nil {
		return err
	}
	if err := p2p.WriteMsg(s, &pb.ReceiptReply{Receipt: rcs}); err != nil {
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
func (f *follow) check(rc *pb.Receipt) error {
	mine := market.NewReceipt(f.lease, f.cs, market.ReceiptTerms{Outcome: rc.Outcome, End: time.UnixMilli(rc.EndUnixMs),
		Beats: f.beats.Beats(), Root: f.beats.Root(), LastBeat: f.last(), ExitCode: rc.ExitCode, Note: rc.Note})
	switch {
	case rc.LeaseId != mine.LeaseId || !bytes.Equal(rc.LeaseHash, mine.LeaseHash):
		return errors.New("the receipt names another lease")
	case !bytes.Equal(rc.Renter, mine.Renter) || !bytes.Equal(rc.Provider, mine.Provider):
		return errors.New("the receipt names other parties")
	case rc.Beats != mine.Beats || !bytes.Equal(rc.TelemetryRoot, mine.TelemetryRoot):
		return fmt.Errorf("telemetry: the receipt says %d beats, %d verified here", rc.Beats, mine.Beats)
	case rc.MeteredSeconds != mine.MeteredSeconds || rc.AmountMicros != mine.AmountMicros || rc.Currency != mine.Currency:
		return fmt.Errorf("amount: the receipt says %d s for %s, verified here %d s for %s", rc.MeteredSeconds, market.FormatPrice(rc.AmountMicros), mine.MeteredSeconds, market.FormatPrice(mine.AmountMicros))
	case !proto.Equal(rc, mine):
		return errors.New("the receipt's terms differ from the lease's")
	}
	return nil
}

// last is when the last verified beat was taken (zero with none).
func (f *follow) last() time.Time {
	if f.beats.Beats() == 0 {
		return time.Time{}
	}
	return f.beats.Last()
}

// providerGone ends the lease without the provider: a receipt of the
// renter's own, for the time its verified beats cover.
func (f *follow) providerGone() error {
	f.out.say("the provider is gone; paying only for verified telemetry")
	return f.own(pb.Outcome_OUTCOME_FAILED, "the provider vanished")
}

// own records a receipt signed by the renter alone.
func (f *follow) own(outcome pb.Outcome, note string) error {
	rc := market.NewReceipt(f.lease, f.cs, market.ReceiptTerms{Outcome: outcome, End: f.r.clock.Now(),
		Beats: f.beats.Beats(), Root: f.beats.Root(), LastBeat: f.last(), ExitCode: -1, Note: note})
	rcs, err := market.NewCoSigned(f.r.key, market.Renter, rc)
	if err != nil {
		return err
	}
	return f.store(rc, rcs)
}

// store records the lease's end and settles the receipt in one batch.
func (f *follow) store(rc *pb.Receipt, rcs *pb.CoSigned) error {
	f.rec.End(rc, rcs)
	f.rec.Beats, f.rec.Root, f.rec.LastBeat = f.beats.Beats(), f.beats.Root(), f.last().UnixMilli()
	f.receipt, f.amount = receiptView(rc, rcs), rc.AmountMicros
	if err := f.r.store.Put(context.Background(), f.rec, rc); err != nil {
		return err
	}
	if f.r.ended != nil {
		f.r.ended(f.rec, rc)
	}
	return nil
}

// persist writes the lease's progress: its state and verified beats.
func (f *follow) persist() {
	f.rec.Beats, f.rec.Root, f.rec.LastBeat = f.beats.Beats(), f.beats.Root(), f.last().UnixMilli()
	if err := f.r.store.Put(context.Background(), f.rec, nil); err != nil {
		f.r.log.Warn("lease progress not persisted", "lease", f.lease.Id, "err", err)
	}
}

// resume follows again, after a restart, the leases this node rented
// and had not seen end: a lease still running is followed to its receipt
// (its output kept under logs/), an ended one gets the receipt its
// provider kept, and one whose provider is gone ends with a receipt of
// the renter's own for the beats it verified. Nothing is cancelled.
func (r *renter) resume(ctx context.Context) {
	recs, err := r.store.All(ctx)
	if err != nil {
		r.log.Warn("rentals not resumed", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, rec := range recs {
		if rec.Role != records.Renter || records.Ended(rec.State) {
			continue
		}
		l, cs, err := rec.Open()
		if err != nil {
			r.log.Warn("stored rental unreadable; left as it is", "lease", rec.ID, "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			progress := func(line string) { r.log.Info("resumed rental: "+line, "lease", l.Id) }
			f := &follow{r: r, lease: l, cs: cs, rec: rec, out: RentOutput{Stdout: io.Discard, Stderr: io.Discard, Progress: progress}}
			if err := f.run(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
				r.log.Warn("resumed rental", "lease", l.Id, "err", err)
			}
		}()
	}
	wg.Wait()
}
