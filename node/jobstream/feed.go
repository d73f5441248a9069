// Package jobstream is the provider's end of a lease's job stream: the
// frames a job makes (output, telemetry beats, notices and at the end the
// receipt) carried to the renter that follows the lease, with what a
// renter that re-attaches missed.
//
// jobstream imports market's wire types, p2p's message framing,
// node/records' offsets and node/clock; it must never import node or cmd.
package jobstream

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
)

// Bounds of what a provider keeps for a renter that may not have it.
const (
	// MaxBacklogBytes bounds the job's output a feed keeps, the newest:
	// all of it, written or not, since a frame written to a stream the
	// renter then drops unread is not the renter's.
	MaxBacklogBytes = 1 << 20
	OutputChunk     = 64 << 10
	// FrameDeadline is how long a renter's stream may take to accept a
	// frame before the feed drops it.
	FrameDeadline = 10 * time.Second
)

// Feed carries one lease's frames to its renter. At most one renter
// stream is attached; one that re-attaches gets the term's last extension
// and the last beat again (its
// follower accepts the beats it missed as a gap: the last one vouches for
// the chain) and the output it has not got, of the last MiB the feed keeps
// whether it was written or not (Detach says from where, for the caller
// to send the rest from elsewhere), and the notices it missed. Output
// frames carry their offset in their stream, which tells the feed what a
// renter holds.
// A stream that cannot take a frame within FrameDeadline is dropped.
//
// One goroutine, started by Start, owns the stream, the backlog and the
// last beat, and does every write; the other methods hand it work over
// channels and are safe for concurrent use.
type Feed struct {
	clock   clock.Clock
	in      chan *pb.JobFrame
	attach  chan attachment
	quit    chan struct{} // closed by Close, once
	closing sync.Once
	done    chan struct{} // closed when the owner returns
	replies chan *pb.ReceiptReply
	// vouchers holds the newest voucher the renter sent, not yet taken:
	// each pays for all before it, so an older one is dropped.
	vouchers chan *pb.Voucher
	detach   chan chan records.Offsets
	kept     chan chan records.Output
	// next is where the next output of each stream begins: written by
	// Writer's writers, one per stream.
	next [2]atomic.Int64
	// detachedAt is when the last stream was dropped, in Unix ns of the
	// clock; 0 while one is attached. Written by the owner only.
	detachedAt atomic.Int64

	// Owned by the run goroutine.
	s        network.Stream
	release  chan struct{} // closed when the feed lets go of s
	lastBeat []byte
	lastExt  *pb.JobFrame // the last extension of the lease's term
	// backlog is the newest output (MaxBacklogBytes), written or not,
	// and the notices no renter took, in the order sent.
	backlog      []*pb.JobFrame
	backlogBytes int
	// sent is where each stream's output the owner has taken ends.
	sent [2]int64
}

// attachment is a renter stream to attach, the output the renter holds
// already, and the channel the feed closes when it lets go of the stream.
type attachment struct {
	s       network.Stream
	have    records.Offsets
	release chan struct{}
}

// New returns a feed that starts detached (since the clock's now), with
// lastBeat, when not nil, as the beat to replay: the last one a previous
// run of the provider signed, and from as where the job's output it
// carries begins. It starts nothing.
func New(clk clock.Clock, lastBeat []byte, from records.Offsets) *Feed {
	f := &Feed{
		clock: clock.Or(clk), in: make(chan *pb.JobFrame, 16), attach: make(chan attachment),
		quit: make(chan struct{}), done: make(chan struct{}), replies: make(chan *pb.ReceiptReply, 1), vouchers: make(chan *pb.Voucher, 1),
		detach: make(chan chan records.Offsets), kept: make(chan chan records.Output),
		lastBeat: lastBeat, sent: [2]int64{from.Stdout, from.Stderr},
	}
	f.next[0].Store(from.Stdout)
	f.next[1].Store(from.Stderr)
	f.detachedAt.Store(f.clock.Now().UnixNano())
	return f
}

// Hold puts what an earlier feed of the lease left in this one, for the
// next renter that attaches: output kept (Undelivered's; nil for none)
// in the backlog, and the term's last extension (nil for none). Before
// Start only.
func (f *Feed) Hold(o *records.Output, ext *pb.CoSigned) {
	if ext != nil {
		f.lastExt = &pb.JobFrame{Kind: &pb.JobFrame_Extension{Extension: ext}}
	}
	if o == nil {
		return
	}
	for i, b := range [][]byte{o.Stdout, o.Stderr} {
		at := [2]int64{o.At.Stdout, o.At.Stderr}[i]
		for c := range slices.Chunk(b, OutputChunk) {
			f.deliver(outputFrame(i == 1, at, c))
			at += int64(len(c))
		}
	}
}

// Start starts the goroutine that owns the feed; Close stops it.
func (f *Feed) Start() { go f.run() }

func (f *Feed) run() {
	defer close(f.done)
	for {
		select {
		case fr := <-f.in:
			f.deliver(fr)
		case a := <-f.attach:
			f.attachNow(a)
		case r := <-f.detach:
			f.drain() // what was sent before Detach was called
			f.letGo()
			r <- f.keptFrom()
		case r := <-f.kept:
			f.drain()
			r <- f.undelivered()
		case <-f.quit:
			f.drain()
			if f.s != nil {
				f.s.CloseWrite()
				f.let()
			}
			return
		}
	}
}

// drain delivers the frames sent before Close.
func (f *Feed) drain() {
	for {
		select {
		case fr := <-f.in:
			f.deliver(fr)
		default:
			return
		}
	}
}

// Attach makes s the renter's stream, replacing any other, and replays
// what it missed: the backlog's output past have, what the renter holds.
// It returns a channel closed when the feed lets go of s (another stream
// replaced it, a write failed, or the feed closed): the stream's handler
// holds it until then. The renter's receipt replies on s arrive on
// Replies.
func (f *Feed) Attach(s network.Stream, have records.Offsets) <-chan struct{} {
	a := attachment{s: s, have: have, release: make(chan struct{})}
	select {
	case f.attach <- a:
	case <-f.done:
		close(a.release)
	}
	return a.release
}

func (f *Feed) attachNow(a attachment) {
	f.letGo()
	f.s, f.release = a.s, a.release
	f.detachedAt.Store(0)
	// A failed write drops the stream: the rest stays for the next attach.
	// The term's extension comes before the beat, which it may cover.
	if f.lastExt != nil && !f.write(f.lastExt) {
		return
	}
	if f.lastBeat != nil && !f.write(&pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: f.lastBeat}}) {
		return
	}
	// Output stays, for a renter that drops this stream unread; a notice
	// written is the renter's.
	have := [2]int64{a.have.Stdout, a.have.Stderr}
	kept := f.backlog[:0]
	for i, fr := range f.backlog {
		if p := past(fr, have); p != nil && !f.write(p) {
			f.backlog = append(kept, f.backlog[i:]...)
			return
		}
		if _, _, ok := output(fr); ok {
			kept = append(kept, fr)
		} else {
			f.backlogBytes -= frameSize(fr)
		}
	}
	clear(f.backlog[len(kept):])
	f.backlog = kept
	go f.readReplies(a.s)
}

// letGo resets and lets go of the attached stream, if any.
func (f *Feed) letGo() {
	if f.s != nil {
		f.s.Reset()
		f.let()
	}
}

// past is the part of output frame fr that lies past have (nil for none:
// the renter holds it); other frames as they are.
func past(fr *pb.JobFrame, have [2]int64) *pb.JobFrame {
	i, b, ok := output(fr)
	if !ok {
		return fr
	}
	skip := have[i] - int64(fr.Offset)
	switch {
	case skip <= 0:
		return fr
	case skip >= int64(len(b)):
		return nil
	}
	return outputFrame(i == 1, int64(fr.Offset)+skip, b[skip:])
}

// output is fr's stream (0 stdout, 1 stderr) and bytes, if it is output.
func output(fr *pb.JobFrame) (stream int, b []byte, ok bool) {
	switch k := fr.Kind.(type) {
	case *pb.JobFrame_Stdout:
		return 0, k.Stdout, true
	case *pb.JobFrame_Stderr:
		return 1, k.Stderr, true
	}
	return 0, nil, false
}

// outputFrame is a frame of output b, beginning at offset at of stdout or
// stderr.
func outputFrame(stderr bool, at int64, b []byte) *pb.JobFrame {
	if stderr {
		return &pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: b}, Offset: uint64(at)}
	}
	return &pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: b}, Offset: uint64(at)}
}

// Detach lets go of the attached stream, if any, and returns where the
// output the feed still holds begins, for each stream (where it is sent
// up to, when the feed holds none of it): a renter that re-attaches
// holding less gets the part before that from elsewhere (the engine's
// log), then attaches.
func (f *Feed) Detach() records.Offsets {
	r := make(chan records.Offsets, 1)
	select {
	case f.detach <- r:
		return <-r
	case <-f.done:
		return records.Offsets{Stdout: f.next[0].Load(), Stderr: f.next[1].Load()}
	}
}

func (f *Feed) keptFrom() records.Offsets {
	from := f.sent
	seen := [2]bool{}
	for _, fr := range f.backlog {
		if i, _, ok := output(fr); ok && !seen[i] {
			seen[i], from[i] = true, int64(fr.Offset)
		}
	}
	return records.Offsets{Stdout: from[0], Stderr: from[1]}
}

// Undelivered is the output the feed holds for a renter that may not
// have it (the last MiB, written or not), each stream's bytes one run
// from its first offset.
func (f *Feed) Undelivered() *records.Output {
	r := make(chan records.Output, 1)
	select {
	case f.kept <- r:
		o := <-r
		return &o
	case <-f.done:
		return nil
	}
}

func (f *Feed) undelivered() records.Output {
	from := f.keptFrom()
	o := records.Output{At: from}
	for _, fr := range f.backlog {
		switch i, b, ok := output(fr); {
		case ok && i == 0:
			o.Stdout = append(o.Stdout, b...)
		case ok:
			o.Stderr = append(o.Stderr, b...)
		}
	}
	return o
}

// Offsets is where the job's output the feed was given ends.
func (f *Feed) Offsets() records.Offsets {
	return records.Offsets{Stdout: f.next[0].Load(), Stderr: f.next[1].Load()}
}

// readReplies hands the renter's replies on s to Replies (answers to
// the receipt) and Vouchers (a voucher alone: the renter's payment for a
// beat it verified).
func (f *Feed) readReplies(s network.Stream) {
	for {
		r := new(pb.ReceiptReply)
		if err := p2p.ReadMsg(s, p2p.MaxLeaseMessage, r); err != nil {
			return
		}
		if r.Receipt == nil && r.Refusal == "" {
			if r.Voucher != nil {
				f.keepVoucher(r.Voucher)
			}
			continue
		}
		select {
		case f.replies <- r:
		default:
		}
	}
}

// keepVoucher makes v the voucher waiting to be taken, in place of an
// older one not taken yet.
func (f *Feed) keepVoucher(v *pb.Voucher) {
	for {
		select {
		case f.vouchers <- v:
			return
		default:
		}
		select {
		case <-f.vouchers:
		default:
		}
	}
}

// Vouchers delivers the renter's vouchers, the newest when several came
// between two reads.
func (f *Feed) Vouchers() <-chan *pb.Voucher { return f.vouchers }

// Replies delivers the renter's answers to the receipt frame.
func (f *Feed) Replies() <-chan *pb.ReceiptReply { return f.replies }

// Send hands f a frame for the attached renter; output is kept for a
// renter that re-attaches, and the last beat always. After Close it
// drops the frame.
func (f *Feed) Send(fr *pb.JobFrame) {
	select {
	case f.in <- fr:
	case <-f.done:
	}
}

func (f *Feed) deliver(fr *pb.JobFrame) {
	switch k := fr.Kind.(type) {
	case *pb.JobFrame_Heartbeat:
		f.lastBeat = k.Heartbeat
	case *pb.JobFrame_Extension:
		f.lastExt = fr
	}
	if i, b, ok := output(fr); ok {
		f.sent[i] = max(f.sent[i], int64(fr.Offset)+int64(len(b)))
	}
	_, _, isOutput := output(fr)
	if f.s != nil && f.write(fr) && !isOutput {
		return
	}
	if n := frameSize(fr); n > 0 {
		f.backlog = append(f.backlog, fr)
		f.backlogBytes += n
		for f.backlogBytes > MaxBacklogBytes && len(f.backlog) > 1 {
			f.backlogBytes -= frameSize(f.backlog[0])
			f.backlog = f.backlog[1:]
		}
	}
}

// write writes fr to the attached stream; on failure it drops the
// stream and reports false.
func (f *Feed) write(fr *pb.JobFrame) bool {
	f.s.SetWriteDeadline(time.Now().Add(FrameDeadline)) // the network's clock
	if err := p2p.WriteMsg(f.s, fr); err != nil {
		f.s.Reset()
		f.let()
		return false
	}
	return true
}

// let lets go of the attached stream; the feed is detached from then on
// (recorded before the release is closed, so whoever waits on it sees it).
func (f *Feed) let() {
	f.detachedAt.Store(f.clock.Now().UnixNano())
	close(f.release)
	f.s, f.release = nil, nil
}

// DetachedFor is how long no renter has been attached (0 while one is).
func (f *Feed) DetachedFor(now time.Time) time.Duration {
	at := f.detachedAt.Load()
	if at == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, at))
}

// Close delivers the frames already sent, ends the attached stream's
// write side (the renter reads to the end) and stops the feed.
func (f *Feed) Close() {
	f.closing.Do(func() { close(f.quit) })
	<-f.done
}

// Writer returns an io.Writer that sends what is written to it as output
// frames of one kind, in chunks, each with its offset in the stream. One
// writer of each kind is written at a time.
func (f *Feed) Writer(stderr bool) io.Writer { return frameWriter{f: f, stderr: stderr} }

// frameWriter turns writes into output frames.
type frameWriter struct {
	f      *Feed
	stderr bool
}

func (w frameWriter) Write(p []byte) (int, error) {
	next := &w.f.next[0]
	if w.stderr {
		next = &w.f.next[1]
	}
	for b := range slices.Chunk(p, OutputChunk) {
		at := next.Add(int64(len(b))) - int64(len(b))
		w.f.Send(outputFrame(w.stderr, at, slices.Clone(b)))
	}
	return len(p), nil
}

// frameSize is the bytes of output or notice f carries; 0 for the frames
// a re-attaching renter does not get from the backlog.
func frameSize(f *pb.JobFrame) int {
	switch k := f.Kind.(type) {
	case *pb.JobFrame_Stdout:
		return len(k.Stdout)
	case *pb.JobFrame_Stderr:
		return len(k.Stderr)
	case *pb.JobFrame_Notice:
		return len(k.Notice)
	}
	return 0
}

// Direct returns writers that send output straight to s, as frames from
// the offsets from on, each within FrameDeadline: for the part of the
// output a renter that re-attaches gets from elsewhere than the feed
// (the engine's log), before Attach hands s to the feed.
func Direct(s network.Stream, from records.Offsets) (stdout, stderr io.Writer) {
	return &directWriter{s: s, at: from.Stdout}, &directWriter{s: s, stderr: true, at: from.Stderr}
}

type directWriter struct {
	s      network.Stream
	stderr bool
	at     int64
}

func (w *directWriter) Write(p []byte) (int, error) {
	for b := range slices.Chunk(p, OutputChunk) {
		w.s.SetWriteDeadline(time.Now().Add(FrameDeadline)) // the network's clock
		if err := p2p.WriteMsg(w.s, outputFrame(w.stderr, w.at, b)); err != nil {
			return 0, err
		}
		w.at += int64(len(b))
	}
	return len(p), nil
}
