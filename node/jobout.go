package node

import (
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
)

// Bounds of what a provider keeps for a renter that is not attached.
const (
	maxBacklogBytes = 1 << 20 // output kept while detached, newest first
	outputChunk     = 64 << 10
	frameDeadline   = 10 * time.Second
)

// jobOutput carries one lease's job frames to its renter: output,
// telemetry beats, notices and at the end the receipt. At most one renter
// stream is attached; one that re-attaches gets the last beat again (its
// follower accepts the beats it missed as a gap: the last one vouches for
// the chain) and the output written while it was away (the last MiB). A
// stream that cannot take a frame within frameDeadline is dropped. Safe
// for concurrent use.
type jobOutput struct {
	mu           sync.Mutex
	s            network.Stream
	detachedAt   time.Time
	lastBeat     []byte
	backlog      []*pb.JobFrame
	backlogBytes int
	replies      chan *pb.ReceiptReply
}

// newJobOutput starts with lastBeat, when not nil, as the beat to replay:
// the last one a previous run of the provider signed.
func newJobOutput(now time.Time, lastBeat []byte) *jobOutput {
	return &jobOutput{detachedAt: now, lastBeat: lastBeat, replies: make(chan *pb.ReceiptReply, 1)}
}

// attach makes s the renter's stream, replacing any other, and replays
// what it missed. The renter's receipt replies arrive on o.replies.
func (o *jobOutput) attach(s network.Stream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.s != nil {
		o.s.Reset()
	}
	o.s = s
	// A failed write drops the stream: the rest stays for the next attach.
	if o.lastBeat != nil && !o.writeLocked(&pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: o.lastBeat}}) {
		return
	}
	for len(o.backlog) > 0 {
		if !o.writeLocked(o.backlog[0]) {
			return
		}
		o.backlogBytes -= frameSize(o.backlog[0])
		o.backlog = o.backlog[1:]
	}
	go o.readReplies(s)
}

// readReplies hands the renter's receipt replies on s to o.replies.
func (o *jobOutput) readReplies(s network.Stream) {
	for {
		r := new(pb.ReceiptReply)
		if err := p2p.ReadMsg(s, p2p.MaxLeaseMessage, r); err != nil {
			return
		}
		select {
		case o.replies <- r:
		default:
		}
	}
}

// send writes f to the attached renter, or keeps output for a renter
// that re-attaches; beats are always kept.
func (o *jobOutput) send(f *pb.JobFrame) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b, ok := f.Kind.(*pb.JobFrame_Heartbeat); ok {
		o.lastBeat = b.Heartbeat
	}
	if o.s != nil && o.writeLocked(f) {
		return
	}
	if n := frameSize(f); n > 0 {
		o.backlog = append(o.backlog, f)
		o.backlogBytes += n
		for o.backlogBytes > maxBacklogBytes && len(o.backlog) > 1 {
			o.backlogBytes -= frameSize(o.backlog[0])
			o.backlog = o.backlog[1:]
		}
	}
}

// writeLocked writes f to the attached stream; on failure it drops the
// stream and reports false.
func (o *jobOutput) writeLocked(f *pb.JobFrame) bool {
	o.s.SetWriteDeadline(time.Now().Add(frameDeadline))
	if err := p2p.WriteMsg(o.s, f); err != nil {
		o.s.Reset()
		o.s, o.detachedAt = nil, time.Now()
		return false
	}
	return true
}

// detachedFor is how long no renter has been attached (0 while one is).
func (o *jobOutput) detachedFor(now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.s != nil {
		return 0
	}
	return now.Sub(o.detachedAt)
}

// close ends the attached stream, if any.
func (o *jobOutput) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.s != nil {
		o.s.CloseWrite()
		o.s = nil
	}
}

// writer returns an io.Writer that sends what is written to it as output
// frames of one kind, in chunks.
func (o *jobOutput) writer(stderr bool) frameWriter { return frameWriter{o: o, stderr: stderr} }

// frameWriter turns writes into output frames.
type frameWriter struct {
	o      *jobOutput
	stderr bool
}

func (w frameWriter) Write(p []byte) (int, error) {
	for b := range slices.Chunk(p, outputChunk) {
		b = slices.Clone(b)
		f := &pb.JobFrame{Kind: &pb.JobFrame_Stdout{Stdout: b}}
		if w.stderr {
			f = &pb.JobFrame{Kind: &pb.JobFrame_Stderr{Stderr: b}}
		}
		w.o.send(f)
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
