// Package jobstream is the provider's end of a lease's job stream: the
// frames a job makes (output, telemetry beats, notices and at the end the
// receipt) carried to the renter that follows the lease, with what a
// renter that re-attaches missed.
//
// jobstream imports market's wire types, p2p's message framing and
// node/clock; it must never import node or cmd.
package jobstream

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
)

// Bounds of what a provider keeps for a renter that is not attached.
const (
	MaxBacklogBytes = 1 << 20 // output kept while detached, newest first
	OutputChunk     = 64 << 10
	// FrameDeadline is how long a renter's stream may take to accept a
	// frame before the feed drops it.
	FrameDeadline = 10 * time.Second
)

// Feed carries one lease's frames to its renter. At most one renter
// stream is attached; one that re-attaches gets the last beat again (its
// follower accepts the beats it missed as a gap: the last one vouches for
// the chain) and the output written while it was away (the last MiB). A
// stream that cannot take a frame within FrameDeadline is dropped.
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
	// detachedAt is when the last stream was dropped, in Unix ns of the
	// clock; 0 while one is attached. Written by the owner only.
	detachedAt atomic.Int64

	// Owned by the run goroutine.
	s            network.Stream
	release      chan struct{} // closed when the feed lets go of s
	lastBeat     []byte
	backlog      []*pb.JobFrame
	backlogBytes int
}

// attachment is a renter stream to attach, and the channel the feed
// closes when it lets go of it.
type attachment struct {
	s       network.Stream
	release chan struct{}
}

// New returns a feed that starts detached (since the clock's now), with
// lastBeat, when not nil, as the beat to replay: the last one a previous
// run of the provider signed. It starts nothing.
func New(clk clock.Clock, lastBeat []byte) *Feed {
	f := &Feed{
		clock: clock.Or(clk), in: make(chan *pb.JobFrame, 16), attach: make(chan attachment),
		quit: make(chan struct{}), done: make(chan struct{}), replies: make(chan *pb.ReceiptReply, 1),
		lastBeat: lastBeat,
	}
	f.detachedAt.Store(f.clock.Now().UnixNano())
	return f
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
// what it missed. It returns a channel closed when the feed lets go of s
// (another stream replaced it, a write failed, or the feed closed): the
// stream's handler holds it until then. The renter's receipt replies on s
// arrive on Replies.
func (f *Feed) Attach(s network.Stream) <-chan struct{} {
	a := attachment{s: s, release: make(chan struct{})}
	select {
	case f.attach <- a:
	case <-f.done:
		close(a.release)
	}
	return a.release
}

func (f *Feed) attachNow(a attachment) {
	if f.s != nil {
		f.s.Reset()
		f.let()
	}
	f.s, f.release = a.s, a.release
	f.detachedAt.Store(0)
	// A failed write drops the stream: the rest stays for the next attach.
	if f.lastBeat != nil && !f.write(&pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: f.lastBeat}}) {
		return
	}
	for len(f.backlog) > 0 {
		if !f.write(f.backlog[0]) {
			return
		}
		f.backlogBytes -= frameSize(f.backlog[0])
		f.backlog = f.backlog[1:]
	}
	go f.readReplies(a.s)
}

// readReplies hands the renter's receipt replies on s to Replies.
func (f *Feed) readReplies(s network.Stream) {
	for {
		r := new(pb.ReceiptReply)
		if err := p2p.ReadMsg(s, p2p.MaxLeaseMessage, r); err != nil {
			return
		}
		select {
		case f.replies <- r:
		default:
		}
	}
}

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
	if b, ok := fr.Kind.(*pb.JobFrame_Heartbeat); ok {
		f.lastBeat = b.Heartbeat
	}
	if f.s != nil && f.write(fr) {
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
// frames of one kind, in chunks.
func (f *Feed) Writer(stderr bool) io.Writer { return frameWriter{f: f, stderr: stderr} }

// frameWriter turns writes into output frames.
type frameWriter struct {
	f      *Feed
	stderr bool
}

func (w frameWriter) Write(p []byte) (int, error) {
	for b := range slices.Chunk(p, OutputChunk) {
		b = slices.Clone(b)
		fr := &pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: b}}
		if w.stderr {
			fr = &pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: b}}
		}
		w.f.Send(fr)
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
