package p2p

import (
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// meshTracker follows gossipsub's mesh through its raw tracer: Graft adds
// a peer to a topic's mesh, Prune and a closed stream remove it. The router
// calls it from its own loop, readers from anywhere: a mutex guards it.
type meshTracker struct {
	mu   sync.Mutex
	mesh map[string]map[peer.ID]struct{}
}

var _ pubsub.RawTracer = (*meshTracker)(nil)

func newMeshTracker() *meshTracker {
	return &meshTracker{mesh: make(map[string]map[peer.ID]struct{})}
}

func (m *meshTracker) peers(topic string) []peer.ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]peer.ID, 0, len(m.mesh[topic]))
	for p := range m.mesh[topic] {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (m *meshTracker) Graft(p peer.ID, topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mesh[topic] == nil {
		m.mesh[topic] = make(map[peer.ID]struct{})
	}
	m.mesh[topic][p] = struct{}{}
}

func (m *meshTracker) Prune(p peer.ID, topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mesh[topic], p)
}

func (m *meshTracker) OnClosedOutboundStream(p peer.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, peers := range m.mesh {
		delete(peers, p)
	}
}

func (m *meshTracker) Leave(topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mesh, topic)
}

func (m *meshTracker) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (m *meshTracker) Join(string)                                          {}
func (m *meshTracker) ValidateMessage(*pubsub.Message)                      {}
func (m *meshTracker) DeliverMessage(*pubsub.Message)                       {}
func (m *meshTracker) RejectMessage(*pubsub.Message, string)                {}
func (m *meshTracker) DuplicateMessage(*pubsub.Message)                     {}
func (m *meshTracker) ThrottlePeer(peer.ID)                                 {}
func (m *meshTracker) RecvRPC(*pubsub.RPC)                                  {}
func (m *meshTracker) SendRPC(*pubsub.RPC, peer.ID)                         {}
func (m *meshTracker) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (m *meshTracker) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (m *meshTracker) UndeliverableMessage(*pubsub.Message)                 {}
