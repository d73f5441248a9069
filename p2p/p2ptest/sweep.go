package p2ptest

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

// sweepAfter is how long a closed mocknet connection is watched for
// streams that outlive it.
const sweepAfter = 10 * time.Second

// sweeper resets the streams that mocknet leaves open on closed
// connections. A mocknet connection resets its streams when it closes,
// but a stream opened on it a moment before (gossipsub greets each new
// peer with one, while a connection manager trims) is added after that
// and is never reset: its goroutines and its reader's wait outlive the
// swarm. Real transports fail such a stream; mocknet needs this. Inside a
// testing/synctest bubble the leak is fatal, since the bubble ends only
// when every goroutine it started has.
//
// One sweeper serves a whole swarm, and every connection it opens asks it
// for the ones due: the closed connections wait in the order they closed,
// so that asking costs what is due, not all a swarm of thousands closed
// in the last sweepAfter (a scan of those was two thirds of a 250-node
// simulation's CPU as it formed).
type sweeper struct {
	mu     sync.Mutex
	closed []closedConn // in the order they closed
	open   map[network.Conn]struct{}
}

type closedConn struct {
	c  network.Conn
	at time.Time
}

func newSweeper() *sweeper {
	return &sweeper{open: map[network.Conn]struct{}{}}
}

// watch follows n's connections.
func (w *sweeper) watch(n network.Network) {
	n.Notify(&network.NotifyBundle{
		ConnectedF: func(_ network.Network, c network.Conn) {
			w.mu.Lock()
			w.open[c] = struct{}{}
			due := w.due(time.Now())
			w.mu.Unlock()
			if len(due) > 0 {
				go reset(due)
			}
		},
		DisconnectedF: func(_ network.Network, c network.Conn) {
			w.mu.Lock()
			delete(w.open, c)
			w.closed = append(w.closed, closedConn{c, time.Now()})
			w.mu.Unlock()
		},
	})
}

// due takes the connections closed sweepAfter before now off the watch.
func (w *sweeper) due(now time.Time) []network.Conn {
	var due []network.Conn
	i := 0
	for ; i < len(w.closed) && now.Sub(w.closed[i].at) >= sweepAfter; i++ {
		due = append(due, w.closed[i].c)
		w.closed[i] = closedConn{}
	}
	w.closed = w.closed[i:]
	return due
}

// sweep resets every stream of every connection it has seen, once the
// hosts are closed, and again after a moment while it finds any: a
// service's goroutine (identify's, say) may still open one on a closed
// connection, and inside a bubble the moment lasts until every other
// goroutine waits.
func (w *sweeper) sweep() {
	w.mu.Lock()
	all := make([]network.Conn, 0, len(w.open)+len(w.closed))
	for c := range w.open {
		all = append(all, c)
	}
	for _, cc := range w.closed {
		all = append(all, cc.c)
	}
	w.open, w.closed = map[network.Conn]struct{}{}, nil
	w.mu.Unlock()
	for round := range 10 {
		if reset(all) == 0 && round > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reset resets the streams of conns and says how many there were.
func reset(conns []network.Conn) int {
	n := 0
	for _, c := range conns {
		for _, s := range c.GetStreams() {
			s.Reset()
			n++
		}
	}
	return n
}
