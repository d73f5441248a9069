package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"github.com/multiformats/go-multistream"
)

// StreamLimits bound the server side of one stream protocol. Every
// protocol here is served through Server.Serve with its limits, so a peer
// that stalls, floods or crashes a handler meets the same defences
// everywhere.
type StreamLimits struct {
	// Service names the protocol's resource-manager service scope; the
	// scope's limits (resources.go) bound the streams and memory of the
	// service as a whole and per peer.
	Service string
	// Memory is reserved in the stream's scope for the handler's
	// buffers before it runs; a stream that cannot get it is reset.
	Memory int
	// Request is a short deadline for the peer's request, from the
	// stream's opening to the last byte the handler reads: a peer that
	// sends one byte and stalls is reset when it runs out, not at
	// Deadline. A handler that reads more later (a job's receipt reply)
	// clears the read deadline itself.
	Request time.Duration
	// Deadline bounds the whole exchange, answer included; 0 for a
	// stream that lives as long as its handler (a job's output).
	Deadline time.Duration
	// PerPeer bounds the streams of one peer handled at once; a stream
	// beyond it waits ShareWait for one of them to end, then is reset,
	// so one peer cannot hold more than its share of the service.
	PerPeer int
	// Rate bounds how many streams one peer opens, sustained and in a
	// burst; a stream beyond it is reset at once, so a peer that has its
	// stalled streams reset cannot simply reopen them, nor use a cheap
	// request to make this node work (an attestation signs a document).
	Rate Rate
}

// StreamHandler serves one stream from peer from. A nil return closes
// the stream; an error resets it. ctx ends with the serving component or
// at the protocol's Deadline.
type StreamHandler func(ctx context.Context, from peer.ID, s network.Stream) error

// Server is what a component serves its protocols with: the host, a
// context that ends when the component stops, and the component's logger.
type Server struct {
	Host  host.Host
	Swarm Swarm // scopes every protocol served (Swarm.Protocol)
	Ctx   context.Context
	Log   *slog.Logger
	// Handlers, when set, counts the handlers running, so that their node
	// can wait for them before it closes what they use.
	Handlers *Handlers
}

// Handlers counts the stream handlers running on a node's servers. Once
// closed it refuses new streams (they are reset) and Close waits for the
// running ones: a node closes its datastore only after the handlers that
// read and write it have returned. The zero value is ready for use.
type Handlers struct {
	mu      sync.Mutex
	running int
	closed  bool
	idle    chan struct{} // closed when running reaches 0 after Close
}

// enter counts a handler in; false once closed.
func (h *Handlers) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.running++
	return true
}

func (h *Handlers) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running--
	if h.running == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// Close refuses new streams and waits up to limit for the running
// handlers to return (each ends with its server's context or its
// protocol's deadline). It returns how many still run.
func (h *Handlers) Close(limit time.Duration) int {
	h.mu.Lock()
	h.closed = true
	if h.running == 0 {
		h.mu.Unlock()
		return 0
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(limit):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running
}

// Errors of served streams, for the counters of tests and logs.
var (
	errPeerShare = errors.New("the peer holds its share of streams of this protocol")
	errPeerRate  = errors.New("the peer opens streams of this protocol too fast")
	errPanic     = errors.New("handler panicked")
)

// Serve registers handle for protocol id with the limits lim.
func (sv Server) Serve(id protocol.ID, lim StreamLimits, handle StreamHandler) {
	id = sv.Swarm.Protocol(id)
	g := &peerGate{max: lim.PerPeer, held: make(map[peer.ID]int), freed: make(map[peer.ID]chan struct{})}
	if lim.Rate.PerSecond > 0 {
		g.rate = newPeerBudget(lim.Rate.PerSecond, lim.Rate.Burst)
	}
	log := sv.Log
	if log == nil {
		log = slog.Default()
	}
	sv.Host.SetStreamHandler(id, func(s network.Stream) {
		if sv.Handlers != nil {
			if !sv.Handlers.enter() {
				s.Reset() // the node is closing
				return
			}
			defer sv.Handlers.leave()
		}
		err := serveOne(sv.Ctx, g, lim, s, handle)
		if err != nil {
			s.Reset()
			level := slog.LevelDebug
			if errors.Is(err, errPanic) {
				level = slog.LevelError
			}
			log.Log(sv.Ctx, level, "stream refused or failed", "protocol", id, "peer", s.Conn().RemotePeer(), "err", err)
			return
		}
		s.Close()
	})
}

// serveOne applies lim to s and runs handle on it.
func serveOne(ctx context.Context, g *peerGate, lim StreamLimits, s network.Stream, handle StreamHandler) (err error) {
	start := time.Now()
	from := s.Conn().RemotePeer()
	if g.rate != nil && !g.rate.take(from, start) {
		return errPeerRate
	}
	g.supersede(from, s)
	if !g.acquire(ctx, from, ShareWait) {
		return errPeerShare
	}
	defer g.release(from)
	g.hold(from, s)
	defer g.unhold(from, s)
	if err := s.Scope().SetService(lim.Service); err != nil {
		return fmt.Errorf("service scope %s: %w", lim.Service, err)
	}
	if lim.Memory > 0 {
		if err := s.Scope().ReserveMemory(lim.Memory, network.ReservationPriorityHigh); err != nil {
			return fmt.Errorf("reserve %d bytes: %w", lim.Memory, err)
		}
		defer s.Scope().ReleaseMemory(lim.Memory)
	}
	s.SetReadDeadline(start.Add(lim.Request))
	if lim.Deadline > 0 {
		s.SetWriteDeadline(start.Add(lim.Deadline))
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(lim.Deadline))
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
		}
	}()
	return handle(ctx, from, s)
}

// ShareWait is how long a stream of a peer at its share waits for one of
// its others to end. A peer's stream ends on the server a moment after
// the peer reads its answer, so a peer that asks again at once would
// otherwise race its own last stream.
const ShareWait = 250 * time.Millisecond

// peerGate counts the streams each peer holds open on one protocol.
// Its mutex guards only the counts; no I/O happens under it.
type peerGate struct {
	max   int
	rate  *peerBudget // nil: no rate
	mu    sync.Mutex
	held  map[peer.ID]int
	freed map[peer.ID]chan struct{} // closed when a stream of the peer ends
	// streams are the streams each peer holds its share with.
	streams map[peer.ID]map[network.Stream]struct{}
}

// hold and unhold note the stream s that p holds one of its share with.
func (g *peerGate) hold(p peer.ID, s network.Stream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.streams == nil {
		g.streams = map[peer.ID]map[network.Stream]struct{}{}
	}
	if g.streams[p] == nil {
		g.streams[p] = map[network.Stream]struct{}{}
	}
	g.streams[p][s] = struct{}{}
}

func (g *peerGate) unhold(p peer.ID, s network.Stream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.streams[p], s)
	if len(g.streams[p]) == 0 {
		delete(g.streams, p)
	}
}

// supersede resets the streams p holds its full share with on
// connections opened before s's: a peer back on a new connection (a
// restarted renter, whose old QUIC connection is not known dead until
// its idle timeout) gives way to itself, rather than wait out its old
// streams' deadlines. Only p's own streams give way, and only when its
// share is full.
func (g *peerGate) supersede(p peer.ID, s network.Stream) {
	g.mu.Lock()
	var old []network.Stream
	if g.max > 0 && g.held[p] >= g.max {
		opened := s.Conn().Stat().Opened
		for o := range g.streams[p] {
			if o.Conn() != s.Conn() && o.Conn().Stat().Opened.Before(opened) {
				old = append(old, o)
			}
		}
	}
	g.mu.Unlock()
	for _, o := range old {
		o.Reset()
	}
}

// acquire takes one of p's streams, waiting up to wait for one to end
// if p is at its share; false if none did.
func (g *peerGate) acquire(ctx context.Context, p peer.ID, wait time.Duration) bool {
	var timeout <-chan time.Time
	for {
		g.mu.Lock()
		if g.max <= 0 || g.held[p] < g.max {
			g.held[p]++
			g.mu.Unlock()
			return true
		}
		ch := g.freed[p]
		if ch == nil {
			ch = make(chan struct{})
			g.freed[p] = ch
		}
		g.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (g *peerGate) release(p peer.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[p]--; g.held[p] <= 0 {
		delete(g.held, p)
	}
	if ch := g.freed[p]; ch != nil {
		close(ch)
		delete(g.freed, p)
	}
}

// dial opens a stream of protocol id, in swarm sw, to p whose deadline is
// ctx's.
func dial(ctx context.Context, h host.Host, sw Swarm, p peer.ID, ids ...protocol.ID) (network.Stream, error) {
	s, err := OpenStream(ctx, h, p, scoped(sw, ids)...)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	return s, nil
}

// scoped is ids in swarm sw (Swarm.Protocol).
func scoped(sw Swarm, ids []protocol.ID) []protocol.ID {
	full := make([]protocol.ID, len(ids))
	for i, id := range ids {
		full[i] = sw.Protocol(id)
	}
	return full
}

// dialPreferred opens a stream to p on the first of ids, in order of
// preference, that p serves, and says which. The host takes the first
// its peerstore lists without asking, and the peerstore holds what p's
// identify said: it misses a protocol p began to serve later when the
// identify push about it was lost (a receiver takes 10 pushes, then one
// in 5 s, from each /24). So the ids before the first the peerstore lists
// are asked for, in one negotiation, before that one is taken; an older
// peer that serves none of them costs a round trip.
func dialPreferred(ctx context.Context, h host.Host, sw Swarm, p peer.ID, ids ...protocol.ID) (network.Stream, protocol.ID, error) {
	full := scoped(sw, ids)
	known, _ := h.Peerstore().SupportsProtocols(p, full...)
	ask := slices.IndexFunc(full, func(id protocol.ID) bool { return slices.Contains(known, id) })
	if ask < 0 {
		ask = len(ids)
	}
	chosen := func(s network.Stream) (network.Stream, protocol.ID, error) {
		return s, ids[max(0, slices.Index(full, s.Protocol()))], nil
	}
	if ask > 0 {
		s, err := dial(ctx, h, sw, p, ids[:ask]...)
		if err == nil {
			return chosen(s)
		}
		if ask == len(ids) || !errors.As(err, new(multistream.ErrNotSupported[protocol.ID])) {
			return nil, "", err
		}
	}
	s, err := dial(ctx, h, sw, p, ids[ask])
	if err != nil {
		return nil, "", err
	}
	return chosen(s)
}

// requestDeadline is how long a peer has to send a whole request on any
// protocol here: requests are small, and a stalled one holds a stream.
const requestDeadline = 5 * time.Second

// AnswerBuffer is the buffer of an answer of many messages (writeAnswer),
// which its server reserves (StreamLimits.Memory) beside its own.
const AnswerBuffer = 32 << 10

// writeAnswer runs write with a varint message writer on a buffer over
// s, and flushes it once write is done: an answer of many small messages
// (a book sync's offers, a chain's blocks) leaves in writes of up to
// AnswerBuffer, not one a message. Each stream write is a frame of the
// transport's (a yamux header, a noise seal); and mocknet takes a
// stream's writes one at a time, each a link latency after it was made,
// so there a hundred offers written one by one took a hundred latencies.
// What write wrote before it failed may be left unsent.
func writeAnswer(s io.Writer, write func(w msgio.Writer) error) error {
	bw := bufio.NewWriterSize(s, AnswerBuffer)
	if err := write(msgio.NewVarintWriter(bw)); err != nil {
		return err
	}
	return bw.Flush()
}
