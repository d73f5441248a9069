package p2p

import (
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// AllowList is a connection gater that admits only the listed peers, in
// both directions. It checks an outbound dial before it starts and an
// inbound connection as soon as the security handshake has named the
// remote peer, so an unlisted peer never reaches a protocol handler.
// The set is fixed at construction; it is safe for concurrent use.
type AllowList struct {
	allowed map[peer.ID]struct{}
}

// NewAllowList builds a gater admitting exactly ids.
func NewAllowList(ids []peer.ID) *AllowList {
	a := &AllowList{allowed: make(map[peer.ID]struct{}, len(ids))}
	for _, id := range ids {
		a.allowed[id] = struct{}{}
	}
	return a
}

// Allowed reports whether p is on the list.
func (a *AllowList) Allowed(p peer.ID) bool {
	_, ok := a.allowed[p]
	return ok
}

// InterceptPeerDial refuses to dial an unlisted peer.
func (a *AllowList) InterceptPeerDial(p peer.ID) bool { return a.Allowed(p) }

// InterceptAddrDial refuses to dial an unlisted peer at any address.
func (a *AllowList) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return a.Allowed(p) }

// InterceptAccept lets the handshake run: the remote peer is not known yet.
func (a *AllowList) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses a connection, in either direction, once the
// handshake shows the remote peer is unlisted.
func (a *AllowList) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return a.Allowed(p)
}

// InterceptUpgraded admits every connection that passed InterceptSecured.
func (a *AllowList) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}
