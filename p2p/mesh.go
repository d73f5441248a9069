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
//
// It also tells Gossip.PublishFlushed when a message it waits on has been
// written to a peer's stream.
type meshTracker struct {
	mu      sync.Mutex
	mesh    map[string]map[peer.ID]struct{}
	written map[string]chan struct{} // message ID -> closed once written to a peer
}

var _ pubsub.RawTracer = (*meshTracker)(nil)

func newMeshTracker() *meshTracker {
	return &meshTracker{mesh: make(map[string]map[peer.ID]struct{}), written: make(map[string]chan struct{})}
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

func (m *meshTracker) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (m *meshTracker) Join(string)                              {}
func (m *meshTracker) ValidateMessage(*pubsub.Message)          {}
func (m *meshTracker) DeliverMessage(*pubsub.Message)           {}
func (m *meshTracker) RejectMessage(*pubsub.Message, string)    {}
func (m *meshTracker) DuplicateMessage(*pubsub.Message)         {}
func (m *meshTracker) ThrottlePeer(peer.ID)                     {}
func (m *meshTracker) RecvRPC(*pubsub.RPC)                      {}
func (m *meshTracker) SendRPC(*pubsub.RPC, peer.ID)             {}
func (m *meshTracker) SendRPCCompleted(rpc *pubsub.RPC, _ peer.ID, _ time.Duration) {
	if len(rpc.Publish) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range rpc.Publish {
		id := MessageID(msg)
		if ch, ok := m.written[id]; ok {
			close(ch)
			delete(m.written, id)
		}
	}
}

// awaitWritten returns a channel closed once a message with this ID has
// been written to some peer, and a function that stops waiting.
func (m *meshTracker) awaitWritten(id string) (<-chan struct{}, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan struct{})
	m.written[id] = ch
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.written[id] == ch {
			delete(m.written, id)
		}
	}
}
func (m *meshTracker) DropRPC(*pubsub.RPC, peer.ID)         {}
func (m *meshTracker) UndeliverableMessage(*pubsub.Message) {}
