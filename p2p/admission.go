package p2p

import (
	"context"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// IssuerRates are what one issuer this node does not vouch for may get
// into it per topic kind, however its messages come (gossip, book sync):
// a provider publishes an offer of each of its IDs (IssuerCaps) every
// three quarters of an hour, a renter a bid per rental; a burst of twice
// its cap of IDs lets it publish them all, withdraw and publish again.
var IssuerRates = map[string]Rate{TopicOffers: {0.1, 32}, TopicBids: {1, 128}}

// way is how a message came to this node.
type way int

const (
	byGossip way = iota
	bySync       // taken from a peer's book (BookSyncProtocol)
)

// admit decides, before the signature is checked, whether a market
// message of kind that from handed this node is checked at all. Every
// way in comes through it (gossip as the gossip's admission, before
// gossipsub reads the message: Install), so gossip and book sync spend
// the same budgets:
//
//   - the relay's (PeerRates), for gossip: what it sends beyond it counts
//     against its score; a sync is metered by the server it came from
//     (BookLimits) and by the budgets below, and costs the server no
//     score, since its answer is what it was asked for;
//   - an issuer this node vouches for (its own key, a provider it
//     attested: something that cost more than a key or a connection)
//     passes by the rest, even from a relay that spent its budget;
//   - any other issuer needs a token of its own (IssuerRates) and one of
//     the strangers' budget (StrangerRates), which all peers share
//     fairly (sharedBudget): a connection is not trust, so an issuer
//     that hands its own messages to this node over a connection of its
//     own is a stranger like any other. A sync draws on a share of its
//     own (shareOf), and so do a peer's own messages; a sync from a
//     source the operator chose (WithSyncSources) spends the issuers'
//     budgets only.
//
// A message beyond a budget is ignored unread; its verdict names the
// budget (an issuer's spent budget counts as ReasonIssuerCap).
func (v *MarketValidator) admit(kind string, from peer.ID, data []byte, how way) bool {
	now := v.now()
	fromOK := how == bySync || v.budget[kind].take(from, now)
	signer, signed := market.Signer(data)
	if signed && v.vouched != nil && v.vouched(signer) {
		return true
	}
	issuers := v.issuers[kind]
	why, reason := "the peer's budget is spent", ReasonPeerBudget
	switch {
	case !fromOK:
	case signed && issuers != nil && !issuers.has(signer, now):
		why, reason = "the issuer's budget is spent", ReasonIssuerCap
	case !(how == bySync && v.sources != nil && v.sources(from)) && !v.strangers[kind].take(shareOf(from, signer, how), now):
		why, reason = "the strangers' budget is spent", ReasonStrangerBudget
	case signed && issuers != nil && !issuers.take(signer, now):
		why, reason = "the issuer's budget is spent", ReasonIssuerCap
	default:
		return true
	}
	v.judge(kind, reason)
	v.log.Debug("ignored market message", "topic", kind, "from", from, "why", why)
	return false
}

// shareOf is the key of the share of the strangers' budget that what from
// hands this node by how, signed by signer, draws on. A sync draws on a
// share of its own, which no peer holds in the gossip mesh: a neighbour
// whose whole book this node syncs keeps its gossip share for the new
// offers it relays, and a flood by sync competes with the peers outside
// the mesh, never with the mesh relays' half. So do a peer's own
// messages (signer is from): a neighbour whose relay share a flood it
// relays has spent still hands this node what it publishes itself, and
// those compete with the other peers' own messages, such as a hundred
// connections flooding their own offers, outside the mesh relays' half.
func shareOf(from, signer peer.ID, how way) peer.ID {
	switch {
	case how == bySync:
		return from + "/sync"
	case signer == from:
		return from + "/own"
	}
	return from
}

// SyncedOffer admits and checks an offer envelope that came by book sync
// from p, as a gossiped one is (admit): within the budgets, then the
// whole check (CheckSyncedOffer). The offer is returned only with
// ValidationAccept.
func (v *MarketValidator) SyncedOffer(ctx context.Context, p peer.ID, data []byte) (*pb.Offer, pubsub.ValidationResult) {
	if !v.admit(TopicOffers, p, data, bySync) {
		return nil, pubsub.ValidationIgnore
	}
	return v.checkOffer(ctx, data, true, "")
}
