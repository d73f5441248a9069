package p2p

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// The router (go-libp2p-pubsub v0.19.0) forgets a peer's subscriptions
// whenever its own stream to the peer dies while a connection to the
// peer remains: handleDeadPeers clears the peer's topics, then opens a
// new stream. It learns them again only from the peer's hello, which the
// peer sends on a new stream of its own, and the peer opens one only
// when its stream to this node dies too. So where the peer's stream
// lives on (it ran on another connection than the one that closed; a new
// connection came up while the bounder closed the old; this node's
// stream alone was reset or timed out), the router goes on treating a
// connected peer as following nothing: it never grafts the peer into a
// mesh, and a shard of three followers has lost one for as long as the
// connection lasts. And the router reopens its own stream to a peer at
// most four times in ten minutes (its dead-peer backoff), then not at
// all while the peer stays connected.
//
// subWatch notices both. A peer that had sent its subscriptions, whose
// subscriptions the router then cleared while still connected to it, and
// which within resubscribeWait has neither sent them again nor been
// given a new stream, is disconnected, so that both routers drop each
// other cleanly, and dialled again redialPause later: the new connection
// starts both routers afresh, hellos and all. A peer with a stream of
// the node's own protocols open (a lease, a job's output, a transfer)
// keeps its connection until those end.
type subWatch struct {
	noTrace
	h       host.Host
	app     string // prefix of the swarm's own protocols
	dht     string // prefix of the swarm's DHT protocols, which are not
	log     *slog.Logger
	repairs atomic.Int64 // peers reconnected
	waited  atomic.Int64 // sweeps that found a peer due but busy

	mu        sync.Mutex
	announced map[peer.ID]struct{}      // peers that sent a subscription since the router last cleared theirs
	stale     map[peer.ID]*staleRouting // peers the router forgot while connected
	wg        sync.WaitGroup            // redials
}

var _ pubsub.RawTracer = (*subWatch)(nil)

// staleRouting is what the router still lacks of a peer it cleared.
type staleRouting struct {
	since    time.Time
	noStream bool // it has not opened a new stream to the peer
	noHello  bool // the peer has not sent its subscriptions again
}

const (
	// resubscribeWait is how long a peer the router forgot has to be
	// learnt again: the router's first new stream goes at once, the
	// peer's hello a round trip later.
	resubscribeWait = 5 * time.Second
	// redialPause is how long after closing a peer subWatch dials it
	// again, so that both routers have dropped the old connection's
	// streams first: a router that hears of the new connection first
	// keeps the old peer state and clears the new hello.
	redialPause = time.Second
	// redialTimeout bounds that dial.
	redialTimeout = 15 * time.Second
)

func newSubWatch(h host.Host, s Swarm, log *slog.Logger) *subWatch {
	if log == nil {
		log = slog.Default()
	}
	return &subWatch{h: h, app: string(s.DHTPrefix()) + "/", dht: string(s.DHTPrefix()) + "/kad/", log: log,
		announced: make(map[peer.ID]struct{}), stale: make(map[peer.ID]*staleRouting)}
}

// heard notes an RPC the router is about to read from a peer, on the
// router's loop: one that subscribes to a topic is the peer's hello, or
// a later subscription.
func (w *subWatch) heard(from peer.ID, rpc *pubsub.RPC) {
	for _, s := range rpc.GetSubscriptions() {
		if !s.GetSubscribe() {
			continue
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.announced[from] = struct{}{}
		if st := w.stale[from]; st != nil {
			st.noHello = false
			w.settle(from, st)
		}
		return
	}
}

// OnNewOutboundStream is the router opening a stream to p.
func (w *subWatch) OnNewOutboundStream(p peer.ID, _ protocol.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.stale[p]; st != nil {
		st.noStream = false
		w.settle(p, st)
	}
}

// OnClosedOutboundStream is the router dropping p: it has just cleared
// p's subscriptions. Where p is still connected, the router will not
// hear them again unless p opens a new stream.
func (w *subWatch) OnClosedOutboundStream(p peer.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, had := w.announced[p]
	delete(w.announced, p)
	if had && w.h.Network().Connectedness(p) == network.Connected {
		w.stale[p] = &staleRouting{since: time.Now(), noStream: true, noHello: true}
		return
	}
	delete(w.stale, p)
}

// settle forgets st once the router has p back; w.mu is held.
func (w *subWatch) settle(p peer.ID, st *staleRouting) {
	if !st.noStream && !st.noHello {
		delete(w.stale, p)
	}
}

// run sweeps once a second until ctx ends, then waits for its redials.
func (w *subWatch) run(ctx context.Context) {
	defer w.wg.Wait()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.sweep(ctx, time.Now())
		}
	}
}

// sweep forgets the peers no longer connected and reconnects those the
// router has not had back within resubscribeWait.
func (w *subWatch) sweep(ctx context.Context, now time.Time) {
	net := w.h.Network()
	var due []peer.ID
	w.mu.Lock()
	for p := range w.announced {
		if net.Connectedness(p) != network.Connected {
			delete(w.announced, p)
		}
	}
	for p, st := range w.stale {
		switch {
		case net.Connectedness(p) != network.Connected:
			delete(w.stale, p)
		case now.Sub(st.since) < resubscribeWait:
		case w.busy(p):
			w.waited.Add(1)
		default:
			delete(w.stale, p)
			due = append(due, p)
		}
	}
	w.mu.Unlock()
	for _, p := range due {
		w.reconnect(ctx, p)
	}
}

// busy says whether a stream of the swarm's own protocols (not its DHT's)
// is open to p.
func (w *subWatch) busy(p peer.ID) bool {
	for _, c := range w.h.Network().ConnsToPeer(p) {
		for _, s := range c.GetStreams() {
			if pr := string(s.Protocol()); strings.HasPrefix(pr, w.app) && !strings.HasPrefix(pr, w.dht) {
				return true
			}
		}
	}
	return false
}

// reconnect closes p and dials it again after redialPause.
func (w *subWatch) reconnect(ctx context.Context, p peer.ID) {
	w.repairs.Add(1)
	ai := peer.AddrInfo{ID: p, Addrs: w.h.Peerstore().Addrs(p)}
	w.log.Info("gossip lost a connected peer's subscriptions; reconnecting", "peer", p)
	if err := w.h.Network().ClosePeer(p); err != nil {
		w.log.Debug("close peer", "peer", p, "err", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(redialPause):
		}
		dctx, cancel := context.WithTimeout(ctx, redialTimeout)
		defer cancel()
		if err := w.h.Connect(dctx, ai); err != nil {
			w.log.Debug("redial after gossip repair failed", "peer", p, "err", err)
		}
	}()
}

// RouterRepairs counts what Gossip did about peers its router forgot
// while connected to them (see subWatch).
type RouterRepairs struct {
	// Forgotten are the connected peers the router has cleared and not
	// had back yet.
	Forgotten int
	// Reconnected are the peers closed and dialled again so far.
	Reconnected int64
	// Waited counts the sweeps that found a forgotten peer due but left
	// it connected, a stream of the swarm's own protocols being open.
	Waited int64
}

// RouterRepairs reports what the node did about peers its router forgot
// while connected to them.
func (g *Gossip) RouterRepairs() RouterRepairs {
	w := g.watch
	w.mu.Lock()
	n := len(w.stale)
	w.mu.Unlock()
	return RouterRepairs{Forgotten: n, Reconnected: w.repairs.Load(), Waited: w.waited.Load()}
}
