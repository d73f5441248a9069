package p2ptest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Traffic counts the bytes a node's outbound streams carried, both ways:
// every protocol the p2p stack runs over its host (kad-dht, gossipsub,
// ping, the coordinate exchange) opens its streams through the host, and
// each stream is counted once, at the end that opened it. Identify runs
// inside the host and is not counted.
type Traffic struct {
	mu      sync.Mutex
	byProto map[protocol.ID]*[2]atomic.Int64 // sent, received
}

// Bytes returns what the counted streams sent and received so far.
func (t *Traffic) Bytes() (sent, received int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.byProto {
		sent += c[0].Load()
		received += c[1].Load()
	}
	return sent, received
}

// ByProtocol returns the bytes (sent plus received) of the counted
// streams of each protocol so far.
func (t *Traffic) ByProtocol() map[protocol.ID]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[protocol.ID]int64, len(t.byProto))
	for p, c := range t.byProto {
		out[p] = c[0].Load() + c[1].Load()
	}
	return out
}

// Family names the part of the stack a protocol belongs to: gossip,
// dht, ping, coord (coordinates), book (book sync), evidence (evidence
// sync), or else the protocol's ID.
func Family(id protocol.ID) string {
	for _, f := range [...]struct{ part, name string }{
		{"meshsub", "gossip"}, {"kad", "dht"}, {"ping", "ping"}, {"coord", "coord"}, {"/book/", "book"}, {"/evidence/", "evidence"},
	} {
		if strings.Contains(string(id), f.part) {
			return f.name
		}
	}
	return string(id)
}

// BytesByFamily is the swarm's counted stream bytes (WithTraffic) since
// the counters' reset, sent and received, by Family.
func (s *Swarm) BytesByFamily() map[string]int64 {
	by := map[string]int64{}
	for _, nd := range s.Nodes {
		for p, b := range nd.Traffic.ByProtocol() {
			by[Family(p)] += b
		}
	}
	return by
}

// FormatKB formats figures in bytes, by family, as KB, largest first.
func FormatKB(by map[string]float64) string {
	keys := slices.Collect(maps.Keys(by))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(by[b], by[a]) })
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s %.1f", k, by[k]/1e3)
	}
	return strings.Join(out, ", ")
}

// Reset sets every count back to zero.
func (t *Traffic) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.byProto {
		c[0].Store(0)
		c[1].Store(0)
	}
}

// of is the counters of protocol p.
func (t *Traffic) of(p protocol.ID) *[2]atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byProto == nil {
		t.byProto = map[protocol.ID]*[2]atomic.Int64{}
	}
	c := t.byProto[p]
	if c == nil {
		c = new([2]atomic.Int64)
		t.byProto[p] = c
	}
	return c
}

// wrappedHost is a host with its outbound streams counted, with a
// connection manager of its own to close (a mocknet host has none; see
// Swarm.wrap), and with its mocknet links made as it dials.
type wrappedHost struct {
	host.Host
	cm      connmgr.ConnManager // nil: none of its own
	traffic *Traffic            // nil: not counted
	link    func(a, b peer.ID)  // WithLazyLinks: links the two before a dial
}

// Unwrap is the host h wraps (p2p.BoundEvictions reads a bound one).
func (h *wrappedHost) Unwrap() host.Host { return h.Host }

func (h *wrappedHost) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if h.link != nil {
		h.link(h.ID(), ai.ID)
	}
	return h.Host.Connect(ctx, ai)
}

func (h *wrappedHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if h.link != nil {
		h.link(h.ID(), p)
	}
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil || h.traffic == nil {
		return s, err
	}
	return &countedStream{Stream: s, n: h.traffic.of(s.Protocol())}, nil
}

func (h *wrappedHost) Close() error {
	err := h.Host.Close()
	if h.cm != nil {
		h.cm.Close()
	}
	return err
}

type countedStream struct {
	network.Stream
	n *[2]atomic.Int64 // its protocol's bytes sent and received
}

func (s *countedStream) Read(b []byte) (int, error) {
	n, err := s.Stream.Read(b)
	s.n[1].Add(int64(n))
	return n, err
}

func (s *countedStream) Write(b []byte) (int, error) {
	n, err := s.Stream.Write(b)
	s.n[0].Add(int64(n))
	return n, err
}
