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
// connection lasts. The router reopens its own stream to a peer at most
// four times in ten minutes (its dead-peer backoff), then not at all
// while the peer stays connected; and the close of the peer's stream can
// clear its subscriptions after the hello of the stream that replaced it.
//
// subWatch notices all of these the same way: it keeps the topics each
// connected peer has said it follows (what the router kept of its
// subscription RPCs, seen by the RPC inspector before the router reads
// them) and, once a second, asks the router which peers it has on those
// topics. A connected peer missing from a topic it follows, or without
// the router's stream, for resubscribeWait is closed, so that both
// routers drop each other cleanly, and dialled again redialPause later:
// the new connection starts both routers afresh, hellos and all. A peer
// with a stream of the node's own protocols open (a lease, a job's
// output, a transfer) keeps its connection until those end.
type subWatch struct {
	h      host.Host
	filter pubsub.SubscriptionFilter // the router's own: what it keeps, kept here
	app    string                    // prefix of the swarm's own protocols
	dht    string                    // prefix of the swarm's DHT protocols, which are not
	log    *slog.Logger

	repairs atomic.Int64 // peers reconnected
	waited  atomic.Int64 // sweeps that found a peer due but busy

	mu      sync.Mutex
	follows map[peer.ID]map[string]struct{} // by peer, the topics it said it follows
	missing map[peer.ID]time.Time           // connected peers the router lacks, since
	wg      sync.WaitGroup                  // redials
}

const (
	// resubscribeWait is how long the router may lack a connected peer
	// on a topic it follows: the router's first new stream goes at
	// once, the peer's hello a round trip later.
	resubscribeWait = 5 * time.Second
	// redialPause is how long after closing a peer subWatch dials it
	// again, so that both routers have dropped the old connection's
	// streams first: a router that hears of the new connection first
	// keeps the old peer state and clears the new hello.
	redialPause = time.Second
	// redialTimeout bounds that dial.
	redialTimeout = 15 * time.Second
)

func newSubWatch(h host.Host, s Swarm, filter pubsub.SubscriptionFilter, log *slog.Logger) *subWatch {
	if log == nil {
		log = slog.Default()
	}
	return &subWatch{h: h, filter: filter, app: string(s.DHTPrefix()) + "/", dht: string(s.DHTPrefix()) + "/kad/", log: log,
		follows: make(map[peer.ID]map[string]struct{}), missing: make(map[peer.ID]time.Time)}
}

// heard notes the subscriptions of an RPC the router is about to read
// from a peer, on the router's loop, as the router will keep them: those
// its filter passes, none of an RPC the filter refuses.
func (w *subWatch) heard(from peer.ID, rpc *pubsub.RPC) {
	subs := rpc.GetSubscriptions()
	if len(subs) == 0 {
		return
	}
	subs, err := w.filter.FilterIncomingSubscriptions(from, subs)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	topics := w.follows[from]
	for _, s := range subs {
		switch {
		case s.GetSubscribe() && topics == nil:
			topics = map[string]struct{}{s.GetTopicid(): {}}
			w.follows[from] = topics
		case s.GetSubscribe():
			topics[s.GetTopicid()] = struct{}{}
		default:
			delete(topics, s.GetTopicid())
		}
	}
}

// run sweeps once a second until ctx ends, then waits for its redials.
func (w *subWatch) run(ctx context.Context, ps *pubsub.PubSub) {
	defer w.wg.Wait()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.sweep(ctx, ps, time.Now())
		}
	}
}

// sweep forgets the peers no longer connected, notes those the router
// lacks, and reconnects those it has lacked for resubscribeWait. It asks
// the router outside w.mu: the router's loop takes w.mu (heard).
func (w *subWatch) sweep(ctx context.Context, ps *pubsub.PubSub, now time.Time) {
	net := w.h.Network()
	follows := map[peer.ID][]string{}
	topics := map[string]bool{}
	w.mu.Lock()
	for p, ts := range w.follows {
		follows[p] = make([]string, 0, len(ts)) // one that follows nothing now is still forgotten once gone
		for t := range ts {
			follows[p] = append(follows[p], t)
			topics[t] = true
		}
	}
	w.mu.Unlock()
	has := map[string]map[peer.ID]bool{"": peerSet(ps.ListPeers(""))} // "": those the router has a stream to
	for t := range topics {
		has[t] = peerSet(ps.ListPeers(t))
	}
	var due []peer.ID
	w.mu.Lock()
	for p, ts := range follows { // a peer heard since is looked at next time
		if net.Connectedness(p) != network.Connected {
			delete(w.follows, p)
			delete(w.missing, p)
			continue
		}
		lacks := !has[""][p]
		for _, t := range ts {
			lacks = lacks || !has[t][p]
		}
		since, was := w.missing[p]
		switch {
		case !lacks:
			delete(w.missing, p)
		case !was:
			w.missing[p] = now
		case now.Sub(since) >= resubscribeWait:
			due = append(due, p)
		}
	}
	w.mu.Unlock()
	for _, p := range due {
		if w.busy(p) {
			w.waited.Add(1)
			continue
		}
		w.mu.Lock()
		delete(w.follows, p)
		delete(w.missing, p)
		w.mu.Unlock()
		w.reconnect(ctx, p)
	}
}

// peerSet is ps as a set.
func peerSet(ps []peer.ID) map[peer.ID]bool {
	m := make(map[peer.ID]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m
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

// RouterRepairs counts what Gossip did about connected peers its router
// lacked on topics they follow (see subWatch).
type RouterRepairs struct {
	// Missing are the connected peers the router lacks now.
	Missing int
	// Reconnected are the peers closed and dialled again so far.
	Reconnected int64
	// Waited counts the sweeps that found a peer due but left it
	// connected, a stream of the swarm's own protocols being open.
	Waited int64
}

// RouterRepairs reports what the node did about connected peers its
// router lacked on topics they follow.
func (g *Gossip) RouterRepairs() RouterRepairs {
	w := g.watch
	w.mu.Lock()
	n := len(w.missing)
	w.mu.Unlock()
	return RouterRepairs{Missing: n, Reconnected: w.repairs.Load(), Waited: w.waited.Load()}
}
