package p2ptest

import (
	"context"
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
	sent, received atomic.Int64
}

// Bytes returns what the counted streams sent and received so far.
func (t *Traffic) Bytes() (sent, received int64) { return t.sent.Load(), t.received.Load() }

// Reset sets both counts back to zero.
func (t *Traffic) Reset() { t.sent.Store(0); t.received.Store(0) }

// wrappedHost is a host with its outbound streams counted, and with a
// connection manager of its own to close (a mocknet host has none; see
// Swarm.wrap).
type wrappedHost struct {
	host.Host
	cm      connmgr.ConnManager // nil: none of its own
	traffic *Traffic            // nil: not counted
}

func (h *wrappedHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil || h.traffic == nil {
		return s, err
	}
	return &countedStream{Stream: s, t: h.traffic}, nil
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
	t *Traffic
}

func (s *countedStream) Read(b []byte) (int, error) {
	n, err := s.Stream.Read(b)
	s.t.received.Add(int64(n))
	return n, err
}

func (s *countedStream) Write(b []byte) (int, error) {
	n, err := s.Stream.Write(b)
	s.t.sent.Add(int64(n))
	return n, err
}
