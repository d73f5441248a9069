package swarm

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/geo"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Link is the node's one way to the swarm: the host, the gossip router
// and discovery. Each component declares the small interface it calls
// (provider.Publisher, book.Syncer, renter.Dealer, trust.ReceiptNet,
// trust.ChallengeNet), and Link implements them all; a component's test
// implements its own without a host.
type Link struct {
	Host   host.Host
	Swarm  p2p.Swarm
	Gossip *p2p.Gossip
	Disc   *p2p.Discovery
	Clock  clock.Clock

	mu         sync.Mutex
	unfollowed map[string]time.Time // shards a lookup found no follower of, and when
}

// Publish gossips data on a topic kind (p2p.TopicOffers, …), and an
// offer or a bid on its shards too (p2p.Gossip.Publish).
func (l *Link) Publish(ctx context.Context, kind string, data []byte) error {
	l.reachShards(ctx, kind, data)
	return l.Gossip.Publish(ctx, kind, data)
}

// PublishFlushed publishes and waits until data was written to a peer.
func (l *Link) PublishFlushed(ctx context.Context, kind string, data []byte) error {
	l.reachShards(ctx, kind, data)
	return l.Gossip.PublishFlushed(ctx, kind, data)
}

// shardReach bounds how long a publication waits to find the followers
// of a shard its node knows none of; a shard a lookup found none of is
// not looked up again for shardUnfollowed.
const (
	shardReach      = 3 * time.Second
	shardUnfollowed = time.Minute
)

// reachShards finds followers of the shards of an offer or a bid that
// this node knows none of (p2p.ReachShard), each within shardReach. Where
// none is found, the kind's own topic still carries it to every node
// that follows every shard.
func (l *Link) reachShards(ctx context.Context, kind string, data []byte) {
	if l.Disc == nil {
		return
	}
	for _, sh := range p2p.ClaimedShards(kind, data) {
		l.mu.Lock()
		at, looked := l.unfollowed[sh]
		l.mu.Unlock()
		if looked && time.Since(at) < shardUnfollowed {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, shardReach)
		p2p.ReachShard(rctx, l.Gossip, l.Disc, kind, sh)
		cancel()
		l.mu.Lock()
		if l.unfollowed == nil {
			l.unfollowed = map[string]time.Time{}
		}
		if len(l.Gossip.ShardPeers(kind, sh)) == 0 {
			l.unfollowed[sh] = time.Now()
		} else {
			delete(l.unfollowed, sh)
		}
		l.mu.Unlock()
	}
}

// AwaitMesh returns once this node has a mesh peer on a topic (both ends
// have streams then, so a publication reaches the swarm rather than no
// one), or a topic peer known for a heartbeat and a half (a peer that just
// left and came back is kept out of the mesh for a minute of backoff, but
// flood publishing still reaches it), or after wait, or when ctx ends.
func (l *Link) AwaitMesh(ctx context.Context, kind string, wait time.Duration) {
	deadline := l.Clock.NewTimer(wait)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond) // polls the router: real time
	defer t.Stop()
	var peersSince time.Time
	for len(l.Gossip.Mesh(kind)) == 0 {
		switch {
		case len(l.Gossip.Topic(kind).ListPeers()) == 0:
			peersSince = time.Time{}
		case peersSince.IsZero():
			peersSince = time.Now()
		case time.Since(peersSince) > 1500*time.Millisecond:
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C():
			return
		case <-t.C:
		}
	}
}

// quoteLocateWait bounds the DHT lookup of a renter before a quote: a
// bid costs its issuer nothing, and a quoting slot held by the lookup of
// one that is nowhere is a slot an honest bid waits for.
const QuoteLocateWait = 2 * time.Second

// SendQuote delivers a signed quote to a renter. A renter this node is
// not connected to may be one it has no address for: its bid came
// through a third peer, and a renter, a DHT client, is in no routing
// table. The DHT finds it all the same (a peer connected to it answers
// for it).
func (l *Link) SendQuote(ctx context.Context, to peer.ID, env []byte) error {
	if !l.Connected(to) {
		lctx, cancel := context.WithTimeout(ctx, QuoteLocateWait)
		err := l.Disc.Locate(lctx, to)
		cancel()
		if err != nil {
			return fmt.Errorf("send quote to %s: %w", to, err)
		}
	}
	return p2p.SendQuote(ctx, l.Host, l.Swarm, to, env)
}

// Connected says whether this node has a connection to p, relayed or
// direct, now.
func (l *Link) Connected(p peer.ID) bool { return len(l.Host.Network().ConnsToPeer(p)) > 0 }

// FetchEvidence asks p for the evidence it recorded.
func (l *Link) FetchEvidence(ctx context.Context, p peer.ID, each func([]byte)) (int, error) {
	return p2p.FetchEvidence(ctx, l.Host, l.Swarm, p, each)
}

// FetchReceipts asks p for the receipts it holds that name subject.
func (l *Link) FetchReceipts(ctx context.Context, p, subject peer.ID, each func([]byte)) (int, error) {
	return p2p.FetchReceipts(ctx, l.Host, l.Swarm, p, subject, each)
}

// FetchChain reads p's chain of lease records as q asks.
func (l *Link) FetchChain(ctx context.Context, p peer.ID, q p2p.ChainQuery, each func([]byte)) (int, error) {
	return p2p.FetchChain(ctx, l.Host, l.Swarm, p, q, each)
}

// FetchBook syncs p's book, less what held says this node holds.
func (l *Link) FetchBook(ctx context.Context, p peer.ID, held *p2p.BookDigest, each func([]byte)) (int, error) {
	return p2p.FetchBook(ctx, l.Host, l.Swarm, p, held, each)
}

// FetchShards reads the offers of some shards of p's book (p2p.FetchShards).
func (l *Link) FetchShards(ctx context.Context, p peer.ID, shards []string, held *p2p.BookDigest, each func([]byte)) (int, error) {
	return p2p.FetchShards(ctx, l.Host, l.Swarm, p, shards, held, each)
}

// SyncPeers lists the connected peers that serve book sync, shuffled.
func (l *Link) SyncPeers() []peer.ID {
	peers := l.Host.Network().Peers()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	out := peers[:0]
	for _, p := range peers {
		if ok, _ := l.Host.Peerstore().SupportsProtocols(p, l.Swarm.Protocol(p2p.BookSyncProtocol)); len(ok) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Locate finds p's addresses and connects to it.
func (l *Link) Locate(ctx context.Context, p peer.ID) error { return l.Disc.Locate(ctx, p) }

// Relocate looks p up again: it may be back on another address.
func (l *Link) Relocate(ctx context.Context, p peer.ID) { l.Disc.Relocate(ctx, p) }

// Challenge sends p an attestation challenge.
func (l *Link) Challenge(ctx context.Context, p peer.ID) (p2p.Answer, error) {
	return p2p.Challenge(ctx, l.Host, l.Swarm, p)
}

// RequestLease sends a lease request to provider p.
// A cancel or a detach goes out at once, past the swarm's dial backoff.
func (l *Link) RequestLease(ctx context.Context, p peer.ID, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	if req.GetCancelLeaseId() != "" || req.GetDetachLeaseId() != "" {
		p2p.ForgetDialBackoff(l.Host, p)
	}
	return p2p.RequestLease(ctx, l.Host, l.Swarm, p, req)
}

// Upload stages a tar at provider p, from where p's copy ends.
func (l *Link) Upload(ctx context.Context, p peer.ID, sum []byte, size int64, open func(offset int64) (io.ReadCloser, error)) (int64, error) {
	return p2p.Upload(ctx, l.Host, l.Swarm, p, sum, size, open)
}

// Download fetches output index of lease from provider p, from offset.
func (l *Link) Download(ctx context.Context, p peer.ID, lease string, index int, offset int64, w io.Writer) (int64, []byte, error) {
	return p2p.Download(ctx, l.Host, l.Swarm, p, lease, index, offset, w)
}

// AttachJob opens a job stream to provider p, past the swarm's dial
// backoff: a provider back from a restart is reached at once.
func (l *Link) AttachJob(ctx context.Context, p peer.ID, att *pb.JobAttach) (network.Stream, error) {
	p2p.ForgetDialBackoff(l.Host, p)
	return p2p.AttachJob(ctx, l.Host, l.Swarm, p, att)
}

// ReadyImage asks provider p to make image ref present before a lease.
func (l *Link) ReadyImage(ctx context.Context, p peer.ID, ref string, deadline time.Duration, progress func(*pb.ImageProgress)) (*pb.ImageReady, error) {
	return p2p.ReadyImage(ctx, l.Host, l.Swarm, p, ref, deadline, progress)
}

// SendImage offers provider p an image of this machine's engine.
func (l *Link) SendImage(ctx context.Context, p peer.ID, id string, up *pb.ImageUpload, deadline time.Duration, write func(w io.Writer, have int) error) (*pb.ImageReady, error) {
	return p2p.SendImage(ctx, l.Host, l.Swarm, p, id, up, deadline, write)
}

// RTTs gives the matcher the peerstore's latency EWMA, an estimate
// from this node's network coordinate and the offer's (or the one its
// issuer gave over the coordinate exchange) where none was measured, and
// the worst measured for the RTTs it neither knows nor can estimate.
type RTTs struct {
	h      host.Host
	coords *p2p.Coordinates
	place  *geo.Place // where this node is; nil: unknown
}

// NewRTTs is h's RTTs, estimated from coords where none was measured,
// holding claimed countries to place (nil: unknown).
func NewRTTs(h host.Host, coords *p2p.Coordinates, place *geo.Place) RTTs {
	return RTTs{h: h, coords: coords, place: place}
}

// Implausible holds an offer's claimed country to the RTT measured to
// its issuer from where this node is (market.RegionVerifier).
func (r RTTs) Implausible(issuer peer.ID, country string) string {
	if r.place == nil || country == "" {
		return ""
	}
	d, ok := r.RTT(issuer)
	if !ok {
		return ""
	}
	claimed, err := geo.ParsePlace(country)
	if err != nil {
		return ""
	}
	if least, ok := geo.Check(*r.place, claimed, d); !ok {
		return fmt.Sprintf("measured %s from %s, where light needs at least %s", d.Round(100*time.Microsecond), r.place.Name, least.Round(time.Millisecond))
	}
	return ""
}

// EstimateRTT estimates the RTT to an offer's issuer from coordinates:
// the one it answered this node with, else the offer's, c.
func (r RTTs) EstimateRTT(issuer peer.ID, c *pb.NetworkCoordinate) (time.Duration, bool) {
	d, err := r.coords.EstimateTo(issuer, c)
	return d, err == nil
}

// RTT is the RTT measured to p: the median of the last samples the
// pinger took (each the least of a few echoes), or the peerstore's EWMA
// of every ping for a peer that answers no coordinate exchange.
func (r RTTs) RTT(p peer.ID) (time.Duration, bool) {
	if d, ok := r.coords.RTT(p); ok {
		return d, true
	}
	d := r.h.Peerstore().LatencyEWMA(p)
	return d, d > 0
}

// WorstRTT is the largest RTT measured to a peer this node is connected
// to: the peers it has measured lately.
func (r RTTs) WorstRTT() time.Duration {
	var worst time.Duration
	for _, p := range r.h.Network().Peers() {
		d, _ := r.RTT(p)
		worst = max(worst, d)
	}
	return worst
}
