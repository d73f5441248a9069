package node

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/idlegrid/idlegrid/internal/fanout"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/geo"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/provider"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// The node's components reach the swarm through these small interfaces,
// each listing what one of them calls; swarmLink implements them all over
// the host, the gossip router and discovery. A component's test can
// implement its own without a host.

// swarmLink is the node's one implementation of the interfaces above.
type swarmLink struct {
	host   host.Host
	swarm  p2p.Swarm
	gossip *p2p.Gossip
	disc   *p2p.Discovery
	clock  clock.Clock
}

var (
	_ provider.Publisher = (*swarmLink)(nil)
	_ book.Syncer        = (*swarmLink)(nil)
	_ renter.Dealer      = (*swarmLink)(nil)
)

// Publish gossips data on a topic kind (p2p.TopicOffers, …).
func (l *swarmLink) Publish(ctx context.Context, kind string, data []byte) error {
	t := l.gossip.Topic(kind)
	if t == nil {
		return fmt.Errorf("publish: unknown topic kind %q", kind)
	}
	return t.Publish(ctx, data)
}

// PublishFlushed publishes and waits until data was written to a peer.
func (l *swarmLink) PublishFlushed(ctx context.Context, kind string, data []byte) error {
	return l.gossip.PublishFlushed(ctx, kind, data)
}

// AwaitMesh returns once this node has a mesh peer on a topic (both ends
// have streams then, so a publication reaches the swarm rather than no
// one), or a topic peer known for a heartbeat and a half (a peer that just
// left and came back is kept out of the mesh for a minute of backoff, but
// flood publishing still reaches it), or after wait, or when ctx ends.
func (l *swarmLink) AwaitMesh(ctx context.Context, kind string, wait time.Duration) {
	deadline := l.clock.NewTimer(wait)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond) // polls the router: real time
	defer t.Stop()
	var peersSince time.Time
	for len(l.gossip.Mesh(kind)) == 0 {
		switch {
		case len(l.gossip.Topic(kind).ListPeers()) == 0:
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
const quoteLocateWait = 2 * time.Second

// SendQuote delivers a signed quote to a renter. A renter this node is
// not connected to may be one it has no address for: its bid came
// through a third peer, and a renter, a DHT client, is in no routing
// table. The DHT finds it all the same (a peer connected to it answers
// for it).
func (l *swarmLink) SendQuote(ctx context.Context, to peer.ID, env []byte) error {
	if len(l.host.Network().ConnsToPeer(to)) == 0 {
		lctx, cancel := context.WithTimeout(ctx, quoteLocateWait)
		err := l.disc.Locate(lctx, to)
		cancel()
		if err != nil {
			return fmt.Errorf("send quote to %s: %w", to, err)
		}
	}
	return p2p.SendQuote(ctx, l.host, l.swarm, to, env)
}

// FetchBook syncs p's book.
// FetchEvidence asks p for the evidence it recorded.
func (l *swarmLink) FetchEvidence(ctx context.Context, p peer.ID, each func([]byte)) (int, error) {
	return p2p.FetchEvidence(ctx, l.host, l.swarm, p, each)
}

// FetchReceipts asks p for the receipts it holds that name subject.
func (l *swarmLink) FetchReceipts(ctx context.Context, p, subject peer.ID, each func([]byte)) (int, error) {
	return p2p.FetchReceipts(ctx, l.host, l.swarm, p, subject, each)
}

func (l *swarmLink) FetchBook(ctx context.Context, p peer.ID, each func([]byte)) (int, error) {
	return p2p.FetchBook(ctx, l.host, l.swarm, p, each)
}

// SyncPeers lists the connected peers that serve book sync, shuffled.
func (l *swarmLink) SyncPeers() []peer.ID {
	peers := l.host.Network().Peers()
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	out := peers[:0]
	for _, p := range peers {
		if ok, _ := l.host.Peerstore().SupportsProtocols(p, l.swarm.Protocol(p2p.BookSyncProtocol)); len(ok) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Locate finds p's addresses and connects to it.
func (l *swarmLink) Locate(ctx context.Context, p peer.ID) error { return l.disc.Locate(ctx, p) }

// Relocate looks p up again: it may be back on another address.
func (l *swarmLink) Relocate(ctx context.Context, p peer.ID) { l.disc.Relocate(ctx, p) }

// Challenge sends p an attestation challenge.
func (l *swarmLink) Challenge(ctx context.Context, p peer.ID) (p2p.Answer, error) {
	return p2p.Challenge(ctx, l.host, l.swarm, p)
}

// RequestLease sends a lease request to provider p.
// A cancel or a detach goes out at once, past the swarm's dial backoff.
func (l *swarmLink) RequestLease(ctx context.Context, p peer.ID, req *pb.LeaseRequest) (*pb.LeaseReply, error) {
	if req.GetCancelLeaseId() != "" || req.GetDetachLeaseId() != "" {
		p2p.ForgetDialBackoff(l.host, p)
	}
	return p2p.RequestLease(ctx, l.host, l.swarm, p, req)
}

// Upload stages a tar at provider p, from where p's copy ends.
func (l *swarmLink) Upload(ctx context.Context, p peer.ID, sum []byte, size int64, open func(offset int64) (io.ReadCloser, error)) (int64, error) {
	return p2p.Upload(ctx, l.host, l.swarm, p, sum, size, open)
}

// Download fetches output index of lease from provider p, from offset.
func (l *swarmLink) Download(ctx context.Context, p peer.ID, lease string, index int, offset int64, w io.Writer) (int64, []byte, error) {
	return p2p.Download(ctx, l.host, l.swarm, p, lease, index, offset, w)
}

// AttachJob opens a job stream to provider p, past the swarm's dial
// backoff: a provider back from a restart is reached at once.
func (l *swarmLink) AttachJob(ctx context.Context, p peer.ID, att *pb.JobAttach) (network.Stream, error) {
	p2p.ForgetDialBackoff(l.host, p)
	return p2p.AttachJob(ctx, l.host, l.swarm, p, att)
}

// ReadyImage asks provider p to make image ref present before a lease.
func (l *swarmLink) ReadyImage(ctx context.Context, p peer.ID, ref string, deadline time.Duration, progress func(*pb.ImageProgress)) (*pb.ImageReady, error) {
	return p2p.ReadyImage(ctx, l.host, l.swarm, p, ref, deadline, progress)
}

// SendImage offers provider p an image of this machine's engine.
func (l *swarmLink) SendImage(ctx context.Context, p peer.ID, id string, up *pb.ImageUpload, deadline time.Duration, write func(w io.Writer, have int) error) (*pb.ImageReady, error) {
	return p2p.SendImage(ctx, l.host, l.swarm, p, id, up, deadline, write)
}

// peerRTT gives the matcher the peerstore's latency EWMA, an estimate
// from this node's network coordinate and the offer's (or the one its
// issuer gave over the coordinate exchange) where none was measured, and
// the worst measured for the RTTs it neither knows nor can estimate.
type peerRTT struct {
	h      host.Host
	coords *p2p.Coordinates
	place  *geo.Place // where this node is; nil: unknown
}

// Implausible holds o's claimed country to the RTT measured to its
// issuer from where this node is (market.RegionVerifier).
func (r peerRTT) Implausible(o *pb.Offer) string {
	country := o.GetRegion().GetCountry()
	if r.place == nil || country == "" {
		return ""
	}
	d, ok := r.RTT(market.Issuer(o))
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

// measureWait bounds how long a rental waits to measure its best
// candidates' RTTs: a lookup, a dial, three pings and a coordinate.
const measureWait = 2 * time.Second

// measure locates and pings, in parallel and within measureWait, the
// providers among ps the pinger has no sample of; it reports whether it
// took any. (A peer's only RTT may be the peerstore's EWMA of the ping
// that confirmed its connection, taken while a fresh node starts: that
// one is not trusted to rank by.) The samples settle its coordinate too.
func (n *Node) measure(ctx context.Context, ps []peer.ID) bool {
	pinger := n.pinger
	if pinger == nil { // before the node's ping step started
		return false
	}
	return fanout.Any(ctx, measureWait, ps, func(ctx context.Context, p peer.ID) bool {
		if _, ok := n.coords.RTT(p); ok || n.link.Locate(ctx, p) != nil {
			return false
		}
		pinger.Sample(ctx, p)
		_, ok := n.coords.RTT(p)
		return ok
	})
}

// coordKey is where a node keeps its network coordinate between runs, so
// that a restarted provider's offer carries a settled one at once.
var coordKey = ds.NewKey("/locality/coordinate")

// loadCoordinate takes up the coordinate a previous run kept; one that
// does not decode or check is dropped, and the node starts at the origin.
func (n *Node) loadCoordinate() {
	b, err := n.store.Get(context.Background(), coordKey)
	if err != nil {
		return
	}
	c := new(pb.NetworkCoordinate)
	if err = proto.Unmarshal(b, c); err == nil {
		err = n.coords.SetOwn(c)
	}
	if err != nil {
		n.log.Warn("kept network coordinate dropped", "err", err)
		n.store.Delete(context.Background(), coordKey)
	}
}

// saveCoordinate keeps the node's coordinate for its next run.
func (n *Node) saveCoordinate() {
	b, err := proto.Marshal(p2p.CoordToProto(n.coords.Own()))
	if err == nil {
		err = n.store.Put(context.Background(), coordKey, b)
	}
	if err != nil {
		n.log.Warn("network coordinate not kept", "err", err)
	}
}

// coordSaveEvery is how often a running node keeps its coordinate.
const coordSaveEvery = 10 * time.Minute

// keepNear has the keeper choose again, after every ping interval, the
// peers the connection manager never trims (network.near_peers of least
// measured RTT and network.random_peers at random), until ctx ends. It
// keeps the pinger's pace, on the network's clock.
func (n *Node) keepNear(ctx context.Context) {
	tick := time.NewTicker(n.cfg.Network.PingInterval.Std())
	defer tick.Stop()
	saved := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.keeper.Refresh()
		if time.Since(saved) >= coordSaveEvery { // a crash loses at most this much
			n.saveCoordinate()
			saved = time.Now()
		}
	}
}

// isNear reports whether p is protected as one of the nearest peers.
func (n *Node) isNear(p peer.ID) bool { return n.keeper != nil && n.keeper.Near(p) }

// rtts is the node's RTT source for the matcher and its views.
func (n *Node) rtts() peerRTT { return peerRTT{n.host, n.coords, n.place} }

// EstimateRTT estimates the RTT to o's issuer from coordinates.
func (r peerRTT) EstimateRTT(o *pb.Offer) (time.Duration, bool) {
	d, err := r.coords.EstimateTo(market.Issuer(o), o.GetCoordinate())
	return d, err == nil
}

// RTT is the RTT measured to p: the median of the last samples the
// pinger took (each the least of a few echoes), or the peerstore's EWMA
// of every ping for a peer that answers no coordinate exchange.
func (r peerRTT) RTT(p peer.ID) (time.Duration, bool) {
	if d, ok := r.coords.RTT(p); ok {
		return d, true
	}
	d := r.h.Peerstore().LatencyEWMA(p)
	return d, d > 0
}

// WorstRTT is the largest RTT measured to a peer this node is connected
// to: the peers it has measured lately.
func (r peerRTT) WorstRTT() time.Duration {
	var worst time.Duration
	for _, p := range r.h.Network().Peers() {
		d, _ := r.RTT(p)
		worst = max(worst, d)
	}
	return worst
}
