package node

import (
	"github.com/libp2p/go-libp2p/core/peer"
)

// pricesFrom says whether p's offers count toward this node's
// market-following price: keys cost nothing, and 300 made-up offers in
// 15 s walked a follower from 2.49 to 1.56 (issue 26). An issuer counts
// where this node verified its attestation (a challenge it answered with
// the GPUs its offer claims) and knows where it listens, or where trust
// reaches it over co-signed receipts.
func (n *Node) pricesFrom(p peer.ID) bool {
	if n.challenger != nil && n.challenger.attested(p) && len(n.host.Peerstore().Addrs(p)) > 0 {
		return true
	}
	if n.reputation != nil {
		if sc := n.reputation.scores(); sc != nil && sc.Of(p).Trust > 0 {
			return true
		}
	}
	return false
}
