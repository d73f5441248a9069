package p2ptest

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Leave takes node i out of the swarm at once, as a crash would: no
// goodbye from gossip or the DHT, and its connections closed, which its
// peers see at once (as after a TCP reset; a peer that goes silent is not
// modelled). The nodes after it move down one place in Nodes. Node 0,
// every node's bootstrap peer, stays.
func (s *Swarm) Leave(i int) error {
	if i <= 0 || i >= len(s.Nodes) {
		return fmt.Errorf("p2ptest: node %d cannot leave a swarm of %d (node 0 is the bootstrap)", i, len(s.Nodes))
	}
	nd := s.Nodes[i]
	s.Nodes = append(s.Nodes[:i:i], s.Nodes[i+1:]...)
	// A closed mocknet host still takes dials: unlinked, it fails them
	// as a machine that is gone does.
	s.links.remove(nd.Host.ID())
	return nd.stop()
}

// stop ends one started node: its harness subscriptions and keeper, its
// topics, its routers and loops, then its host.
func (nd *Node) stop() error {
	nd.drainCancel()
	nd.drains.Wait()
	var err error
	if nd.Gossip != nil {
		err = nd.Gossip.Close()
	}
	nd.cancel()
	return errors.Join(err, nd.close())
}

// Join starts a new mocknet node at the matrix's next row, which
// bootstraps from node 0 as every node did, and adds it to Nodes.
func (s *Swarm) Join() (*Node, error) {
	if s.mn == nil {
		return nil, errors.New("p2ptest: Join is for mocknet swarms")
	}
	nd, err := s.newMockNode()
	if err != nil {
		return nil, fmt.Errorf("p2ptest: join: %w", err)
	}
	if !s.cfg.lazy {
		for _, other := range s.Nodes {
			s.links.link(nd.Host.ID(), other.Host.ID())
		}
	}
	h0 := s.Nodes[0].Host
	nd.index = len(s.Nodes)
	if err := s.startNode(nd, []peer.AddrInfo{{ID: h0.ID(), Addrs: h0.Network().ListenAddresses()}}); err != nil {
		return nil, fmt.Errorf("p2ptest: join: %w", errors.Join(err, nd.stop()))
	}
	s.Nodes = append(s.Nodes, nd)
	return nd, nil
}

// remove unlinks host a from every peer and links it to none again.
func (l *links) remove(a peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.index, a)
	for _, p := range l.mn.Peers() {
		if p != a {
			l.mn.UnlinkPeers(a, p) // no link to p: nothing to do
		}
	}
}
