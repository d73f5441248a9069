package renter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// LogFile is where, in the logs folder dir, a renter keeps the output of
// lease id's stream ("stdout" or "stderr").
func LogFile(dir, id, stream string) string { return filepath.Join(dir, id+"."+stream) }

// reattachFor is how long a renter keeps trying to re-attach to a job
// whose stream broke before it counts the provider as gone.
const ReattachFor = 10 * time.Second

// reattachEvery is the pause between attempts to re-attach.
const ReattachEvery = 500 * time.Millisecond

// ResumeAttachFor is how long a follow resumed after this renter's own
// restart tries to attach the first time before it counts the provider
// gone: the provider's default jobs.renter_grace, for which it waits for
// its renter.
const ResumeAttachFor = 30 * time.Second

// relocateWait bounds one lookup of a provider that could not be
// attached to; a DHT lookup takes seconds on a busy machine.
const relocateWait = 3 * time.Second

// ReceiptWait is how long past the lease's term (its end as the last
// extension set it) a renter waits for the provider's receipt: the
// provider's longest stop grace (jobs.stop_grace, at most 10 minutes) and
// the receipt's exchange. A provider that holds the job stream open past
// it and sends no receipt is counted gone, as one that vanished: the
// renter's own receipt pays for the beats it verified, unless the
// provider settles within SettleFor.
const ReceiptWait = 15 * time.Minute

// AttachedWait is the least a stream just attached is given to bring the
// receipt, however late: a provider sends a receipt it holds at once.
const AttachedWait = time.Minute

// errNoReceipt: the job stream brought no receipt by the lease's term
// and ReceiptWait.
var errNoReceipt = errors.New("no receipt after the lease's term")

// beatSkew is how far a telemetry beat's stamp may lie past the lease's
// term or ahead of the renter's clock: the clocks of two machines differ.
const beatSkew = 30 * time.Second

// Follow is a renter following its leased job to the receipt.
type Follow struct {
	R        *Renter
	Lease    *pb.Lease
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
	// have is how much of the job's stdout and stderr this renter holds
	// (its kept logs' sizes when it follows again): sent when attaching,
	// and output frames are kept from there on.
	have [2]int64

	// detachAtStart: leave the lease running once the job has started
	// (rent --detach). detachOnCancel: the caller's ctx ending leaves the
	// lease running (idlegrid attach) instead of cancelling it.
	detachAtStart, detachOnCancel bool
	// leave, closed by leaveNow, ends the follow with the lease left
	// running: detached, or handed to another follow. left says it was.
	leave     chan struct{}
	leaveOnce sync.Once
	left      bool
	// done is closed when run returns.
	done chan struct{}
	// tm is the lease's term as its last extension set it; lease is its
	// Lease (the co-signed lease with the term's duration).
	tm market.Term
	// downloads go into the record of a lease just accepted.
	downloads []records.Download
	// resumed: a follow resumed after this renter's restart; attached:
	// an attach of this follow succeeded.
	resumed, attached bool
	// settling: the follow of a settling lease, by the settler. It tries
	// one attach, and cancels the lease once attached: its renter gave
	// it up when the provider was gone.
	settling bool
	// payer signs the vouchers of a lease paid by a channel, its Lease
	// the term's (extend sets it); nil for a lease not paid by one.
	payer *pay.Payer
}

// newFollow is a follow of lease l, from rec when it follows it again
// (nil for a lease just accepted).
func newFollow(r *Renter, l *pb.Lease, cs *pb.CoSigned, rec *records.Lease, out RentOutput) *Follow {
	tm := market.LeaseTerm(l, cs)
	if rec != nil {
		var err error
		if tm, err = records.Term(l, cs, rec); err != nil {
			r.Log.Warn("rental's extension unreadable; its term is the lease's own", "lease", l.Id, "err", err)
		}
	}
	return &Follow{R: r, Lease: tm.Lease, cs: cs, rec: rec, out: out, leave: make(chan struct{}), done: make(chan struct{}), tm: tm}
}

// extend takes the lease's extension the provider sent: both signatures
// and the lease's terms checked, it moves the term's end (for the beats
// and the receipt) and is recorded. The one the term has already, sent
// again on a re-attach, changes nothing.
func (f *Follow) extend(ext *pb.CoSigned) {
	if f.tm.Extension != nil && market.SameBody(ext, f.tm.Extension) {
		return
	}
	next, err := f.tm.Apply(ext, market.Renter, market.Provider)
	if err != nil {
		f.out.say("extension from the provider refused: %v", err)
		return
	}
	f.tm, f.Lease = next, next.Lease
	if f.payer != nil { // the vouchers owe to the new end
		f.payer.Lease = next.Lease
	}
	f.beats.Extend(next.End())
	f.rec.Extension, _ = proto.Marshal(ext)
	f.rec.EndMs = next.End().UnixMilli()
	f.persist()
	f.out.say("lease %s extended: it ends at %s", f.Lease.Id, next.End().UTC().Format(time.RFC3339))
}

// leaveNow makes the follow let go of the lease, leaving it running.
func (f *Follow) leaveNow() { f.leaveOnce.Do(func() { close(f.leave) }) }

// leaving reports whether leaveNow was called.
func (f *Follow) leaving() bool {
	select {
	case <-f.leave:
		return true
	default:
		return false
	}
}

// keepLogs tees the job's output into the repository's logs folder; a
// folder that cannot be written costs the copy, not the rental.
func (f *Follow) keepLogs() (closeLogs func()) {
	f.stdout, f.stderr = cmp.Or[io.Writer](f.out.Stdout, io.Discard), cmp.Or[io.Writer](f.out.Stderr, io.Discard)
	if err := os.MkdirAll(f.R.LogsDir, 0o700); err != nil {
		f.R.Log.Warn("job output not kept", "err", err)
		return func() {}
	}
	f.noteProvider()
	var files []*os.File
	for _, w := range []*io.Writer{&f.stdout, &f.stderr} {
		stream := "stdout"
		if w == &f.stderr {
			stream = "stderr"
		}
		file, err := os.OpenFile(LogFile(f.R.LogsDir, f.Lease.Id, stream), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			f.R.Log.Warn("job output not kept", "err", err)
			continue
		}
		if fi, err := file.Stat(); err == nil {
			i := 0
			if w == &f.stderr {
				i = 1
			}
			f.have[i] = fi.Size() // what an earlier follow kept
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
// leaves the renter with a receipt of its own for what it verified. A
// follow that leaves the lease running returns nil with left set.
func (f *Follow) run(ctx context.Context) error {
	defer close(f.done)
	provider := peer.ID(f.Lease.Provider)
	if f.rec == nil {
		raw, _ := proto.Marshal(f.cs)
		f.rec = &records.Lease{ID: f.Lease.Id, Role: records.Renter, State: records.Active, Lease: raw, EndMs: market.LeaseEnd(f.Lease).UnixMilli(), Downloads: f.downloads}
		f.beats = attest.NewFollower(provider, f.R.Swarm.Tag(), f.Lease.Id, f.term())
	} else {
		f.beats = attest.ResumeFollower(provider, f.R.Swarm.Tag(), f.Lease.Id, f.term(), f.rec.Beats, f.rec.Root, time.UnixMilli(f.rec.LastBeat))
	}
	defer f.keepLogs()()
	f.startPaying()
	clk := f.R.Clock
	lost := time.Time{}
	for {
		if f.leaving() {
			return f.leaveRunning()
		}
		// The link attaches past the swarm's dial backoff (5 s and more
		// after a failed dial), which would keep a provider back from a
		// restart unreachable for most of reattachFor.
		att := &pb.JobAttach{LeaseId: f.Lease.Id, StdoutOffset: uint64(f.have[0]), StderrOffset: uint64(f.have[1])}
		s, err := f.R.Net.AttachJob(context.WithoutCancel(ctx), provider, att)
		if err == nil {
			lost, f.attached = time.Time{}, true
			f.relayed = s.Conn().Stat().Limited
			done, err := f.read(ctx, s)
			if done {
				return err
			}
			if errors.Is(err, errNoReceipt) && !f.settling {
				return f.providerGone(fmt.Sprintf("no receipt %s after the lease's term ended", ReceiptWait), "the provider sent no receipt after the lease's term")
			}
		}
		if f.R.ctx.Err() != nil {
			f.persist()
			return owner.ErrClosed
		}
		// A follow after this renter's restart waits longer for its
		// first attach: the node may know none of the provider's
		// addresses yet, and its lookups wait on its bootstrap.
		window := ReattachFor
		if f.resumed && !f.attached {
			window = ResumeAttachFor
		}
		if lost.IsZero() && !f.settling {
			lost = clk.Now()
			// A first attach that failed lost nothing, and neither did a
			// stream its caller ended (Ctrl-C) or let go.
			if f.attached && ctx.Err() == nil && !f.leaving() {
				f.out.say("lost the job stream; re-attaching for up to %s", window)
			}
		}
		// It may be back on another address, or this node may know none.
		find, cancel := context.WithTimeout(context.WithoutCancel(ctx), relocateWait)
		f.R.Net.Relocate(find, provider)
		cancel()
		if f.settling {
			f.persist()
			return errNotBack
		}
		if clk.Since(lost) > window {
			return f.providerGone("the provider is gone", "the provider vanished")
		}
		if ctx.Err() != nil {
			f.stopped()
		}
		select { // back off before re-attaching
		case <-clk.After(ReattachEvery):
		case <-f.R.ctx.Done():
		case <-f.leave:
		}
	}
}

// read handles one attached stream's frames; done when the lease ended
// here (receipt handled) or failed for good. A stream that brings no
// receipt by the term's end and ReceiptWait (AttachedWait after it
// attached, if that is later) is reset, and read says errNoReceipt.
func (f *Follow) read(ctx context.Context, s network.Stream) (done bool, err error) {
	defer func() {
		if !done {
			s.Reset()
		}
	}()
	stop := context.AfterFunc(ctx, f.stopped)
	defer stop()
	closing := context.AfterFunc(f.R.ctx, func() { s.Reset() })
	defer closing()
	read := make(chan struct{})
	defer close(read)
	clk := f.R.Clock
	attached := clk.Now()
	receiptBy := func() time.Duration {
		return max(clk.Until(f.tm.End().Add(ReceiptWait)), clk.Until(attached.Add(AttachedWait)))
	}
	late := clk.NewTimer(receiptBy())
	defer late.Stop()
	var overdue atomic.Bool
	f.payAgain(s)
	go func() {
		select {
		case <-f.leave:
			s.Reset()
		case <-late.C():
			overdue.Store(true)
			s.Reset()
		case <-read:
		}
	}()
	for {
		fr := new(pb.JobFrame)
		if err := p2p.ReadMsg(s, p2p.MaxJobFrame, fr); err != nil {
			if overdue.Load() {
				return false, errNoReceipt
			}
			return false, err
		}
		switch k := fr.Kind.(type) {
		case *pb.JobFrame_Stdout:
			f.write(0, fr.Offset, k.Stdout)
		case *pb.JobFrame_Stderr:
			f.write(1, fr.Offset, k.Stderr)
		case *pb.JobFrame_Heartbeat:
			if err := f.beats.Add(k.Heartbeat); err != nil {
				f.out.say("telemetry beat refused: %v", err)
				f.mistimed(err)
			} else if f.payer != nil {
				f.pay(s)
			} else if f.beats.Beats()%10 == 1 {
				f.persist()
			}
		case *pb.JobFrame_Notice:
			f.out.say("provider: %s", k.Notice)
		case *pb.JobFrame_Extension:
			f.extend(k.Extension)
			late.Reset(receiptBy()) // the term may end later now
		case *pb.JobFrame_Started:
			f.out.say("job started: %s", k.Started)
			if f.detachAtStart {
				f.leaveNow()
				s.Reset()
				return true, f.leaveRunning()
			}
		case *pb.JobFrame_Receipt:
			return true, f.settle(s, k.Receipt, fr.Record)
		}
	}
}

// term is when the lease's beats may be stamped: within its term and
// never ahead of this renter's clock, give or take beatSkew.
func (f *Follow) term() attest.Term {
	return attest.Term{Start: time.UnixMilli(f.Lease.StartUnixMs), End: market.LeaseEnd(f.Lease), Now: f.R.Clock.Now, Skew: beatSkew}
}

// mistimed counts a beat the provider stamped out of time against it, as
// a failed lease, once a lease: its signature proves the provider sent it.
func (f *Follow) mistimed(err error) {
	if !errors.Is(err, attest.ErrBeatTime) || f.mistimedSeen || f.R.Observe == nil {
		return
	}
	f.mistimedSeen = true
	f.R.Observe(peer.ID(f.Lease.Provider), false, reputation.WeightMistimed, "lease "+f.Lease.Id+": "+err.Error())
}

// write keeps the part of output b, which begins at offset at of stream
// i (0 stdout, 1 stderr), that this renter does not hold yet; a frame
// past what it holds says how much the provider could not send.
func (f *Follow) write(i int, at uint64, b []byte) {
	if f.firstOutput.IsZero() {
		f.firstOutput = f.R.Clock.Now()
	}
	off := int64(min(at, 1<<62))
	if off > f.have[i] {
		f.out.say("%d bytes of the job's %s are missing here: the provider no longer kept them", off-f.have[i], [2]string{"stdout", "stderr"}[i])
		f.have[i] = off
	}
	skip := f.have[i] - off
	if skip >= int64(len(b)) {
		return
	}
	w := f.stdout
	if i == 1 {
		w = f.stderr
	}
	w.Write(b[skip:])
	f.have[i] += int64(len(b)) - skip
}

// stopped handles the end of the caller's ctx: the lease is cancelled,
// or, for a follow that detaches on it, left running.
func (f *Follow) stopped() {
	if f.detachOnCancel {
		f.leaveNow()
		return
	}
	f.cancel()
}

// leaveRunning tells the provider the renter leaves the job on purpose
// (it runs on with no renter attached, to its term or its end), records
// the lease as detached, and ends the follow with the lease running.
func (f *Follow) leaveRunning() error {
	f.left = true
	ctx, done := context.WithTimeout(context.Background(), cancelWait)
	defer done()
	reply, err := f.R.Net.RequestLease(ctx, peer.ID(f.Lease.Provider), &pb.LeaseRequest{Kind: &pb.LeaseRequest_DetachLeaseId{DetachLeaseId: f.Lease.Id}})
	if err == nil && reply.Lease == nil {
		err = market.RejectOf(reply)
	}
	f.rec.Detached = true
	f.persist()
	if err != nil {
		return fmt.Errorf("lease %s: detach: %w (the provider stops the job once the renter is gone for its jobs.renter_grace)", f.Lease.Id, err)
	}
	f.out.say("detached from lease %s: it runs on; 'idlegrid attach %s' follows it again", f.Lease.Id, f.Lease.Id)
	return nil
}

// cancel asks the provider to end the lease now; the receipt follows on
// the job stream.
func (f *Follow) cancel() { f.cancelOnce.Do(f.sendCancel) }

func (f *Follow) sendCancel() {
	f.out.say("cancelling lease %s; waiting for the receipt", f.Lease.Id)
	ctx, done := context.WithTimeout(context.Background(), cancelWait)
	defer done()
	reply, err := f.R.Net.RequestLease(ctx, peer.ID(f.Lease.Provider), &pb.LeaseRequest{Kind: &pb.LeaseRequest_CancelLeaseId{CancelLeaseId: f.Lease.Id}})
	switch {
	case err != nil:
		f.out.say("cancel not confirmed: %v", err)
	case reply.Lease == nil:
		f.out.say("cancel not confirmed: %s", reply.GetReason())
	}
}

// persist writes the lease's progress: its state and verified beats.
func (f *Follow) persist() {
	f.rec.Beats, f.rec.Root, f.rec.LastBeat = f.beats.Beats(), f.beats.Root(), f.last().UnixMilli()
	if err := f.R.Store.Put(context.Background(), f.rec, nil); err != nil {
		f.R.Log.Warn("lease progress not persisted", "lease", f.Lease.Id, "err", err)
	}
}

// resume follows again, after a restart, the leases this node rented
// and had not seen end, but for those the renter detached from ('idlegrid
// attach' follows those): a lease still running is followed to its
// receipt (its output kept under logs/), an ended one gets the receipt
// its provider kept, and one whose provider is gone settles (see
// providerGone). Nothing is cancelled. Settling leases are the
// settler's.
func (r *Renter) resume(ctx context.Context) {
	r.followStored(ctx, "resumed rental", func(rec *records.Lease) bool {
		return !records.Ended(rec.State) && !rec.Detached && rec.State != records.Settling
	}, func(f *Follow, _ *records.Lease) error {
		f.resumed = true
		return f.run(context.Background())
	})
}

// followStored runs do, in a goroutine of its own, with a follow of each
// lease this renter rented that pick accepts and no follow holds (its
// output kept under logs/ only, its progress logged, as what), and waits
// for them all.
func (r *Renter) followStored(ctx context.Context, what string, pick func(*records.Lease) bool, do func(*Follow, *records.Lease) error) {
	recs, err := r.Store.All(ctx)
	if err != nil {
		r.Log.Warn(what+": leases not read", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, rec := range recs {
		if rec.Role != records.Renter || !pick(rec) {
			continue
		}
		l, cs, err := rec.Open()
		if err != nil {
			r.Log.Warn(what+": stored lease unreadable; left as it is", "lease", rec.ID, "err", err)
			continue
		}
		progress := func(line string) { r.Log.Info(what+": "+line, "lease", l.Id) }
		f := newFollow(r, l, cs, rec, RentOutput{Stdout: io.Discard, Stderr: io.Discard, Progress: progress})
		release, ok := r.claim(f)
		if !ok {
			continue
		}
		// pick saw the record as it was before the claim: a follow that
		// held the lease until then may have changed it (ended it).
		if now, err := r.Store.Get(ctx, rec.ID); err != nil || now.Updated != rec.Updated || now.State != rec.State {
			release()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			if err := do(f, rec); err != nil && !errors.Is(err, owner.ErrClosed) {
				r.Log.Warn(what, "lease", l.Id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// claim makes f the one follow of its lease; false when another has it.
func (r *Renter) claim(f *Follow) (release func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.following[f.Lease.Id] != nil {
		return nil, false
	}
	if r.following == nil {
		r.following = map[string]*Follow{}
	}
	r.following[f.Lease.Id] = f
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.following[f.Lease.Id] == f {
			delete(r.following, f.Lease.Id)
		}
	}, true
}
