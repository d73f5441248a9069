package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
	"google.golang.org/protobuf/proto"
)

// CoordProtocol hands a peer this node's network coordinate: the asking
// peer sends nothing; the server answers with one length-prefixed
// NetworkCoordinate and closes. The connection authenticates who answers.
const CoordProtocol protocol.ID = "/idlegrid/coord/1.0.0"

// Bounds of the coordinate exchange.
const (
	MaxCoordSize  = 256 // bytes of one answer (8 dimensions take 96)
	CoordDeadline = 5 * time.Second
)

// CoordLimits bound the coordinate server: one exchange at a time per
// peer, a burst of 5 and then one a second (a peer that pings asks once
// a ping interval).
var CoordLimits = StreamLimits{
	Service: "idlegrid.coord", Memory: MaxCoordSize,
	Request: requestDeadline, Deadline: CoordDeadline, PerPeer: 1, Rate: Rate{1, 5},
}

// Coordinate errors.
var (
	// ErrCoordOutlier is a sample whose coordinate is wildly inconsistent
	// with the RTT measured to its peer: the peer's claim is ignored.
	ErrCoordOutlier = errors.New("coordinate inconsistent with the measured RTT")
	// ErrCoordUnknown is a coordinate not yet good enough to estimate by.
	ErrCoordUnknown = errors.New("coordinate not settled")
)

// Coordinate bounds: an estimate is made only when both coordinates'
// error estimates are at most EstimateMaxError (serf starts every node at
// 1.5 and lowers it as samples agree). A sample is an outlier when its
// peer's coordinate puts the peer more than outlierFactor times farther
// than the RTT measured (plus outlierSlack), or, once this node's own
// error is at most outlierTrust, as many times nearer.
const (
	EstimateMaxError = 1.0
	outlierTrust     = 0.6
	outlierFactor    = 3
	outlierSlack     = 30 * time.Millisecond
	// maxCoordPeers bounds the peers whose coordinate (and latency
	// filter) this node keeps; the least recently seen goes first.
	maxCoordPeers = 1024
)

// Coordinates is this node's network coordinate (Vivaldi, as
// hashicorp/serf's coordinate package computes it), updated from RTT
// samples to its peers with each peer's coordinate attached, and what it
// last learned of each peer's coordinate. It estimates the RTT to any peer
// whose coordinate it holds, connected or not. Safe for concurrent use.
type Coordinates struct {
	client *coordinate.Client
	cfg    *coordinate.Config

	mu       sync.Mutex
	peers    map[peer.ID]*peerCoord
	outliers uint64
	samples  uint64
}

type peerCoord struct {
	c    *coordinate.Coordinate
	seen time.Time
	// outlier: its last coordinate contradicted the RTT measured to it.
	outlier bool
	// rtts are the last rttSamples RTTs measured, newest at n-1 mod len.
	rtts [rttSamples]time.Duration
	n    int
}

// rttSamples is how many of a peer's RTT samples its measured RTT is the
// median of: one slow sample does not move it.
const rttSamples = 3

// rtt is the median of the samples held.
func (pc *peerCoord) rtt() (time.Duration, bool) {
	k := min(pc.n, rttSamples)
	if k == 0 {
		return 0, false
	}
	s := slices.Clone(pc.rtts[:k])
	slices.Sort(s)
	return s[k/2], true
}

// NewCoordinates returns a coordinate at the origin, with serf's default
// configuration (8 dimensions and a height).
func NewCoordinates() *Coordinates {
	cfg := coordinate.DefaultConfig()
	client, err := coordinate.NewClient(cfg)
	if err != nil { // only for a config with no dimension
		panic(err)
	}
	return &Coordinates{client: client, cfg: cfg, peers: map[peer.ID]*peerCoord{}}
}

// Own is this node's coordinate now.
func (c *Coordinates) Own() *coordinate.Coordinate { return c.client.GetCoordinate() }

// SetOwn sets this node's coordinate, as a previous run kept it; one the
// market would refuse (the wrong shape, not finite, out of bounds) is
// refused.
func (c *Coordinates) SetOwn(own *pb.NetworkCoordinate) error {
	if err := market.CheckCoordinate(own); err != nil {
		return err
	}
	return c.client.SetCoordinate(CoordFromProto(own))
}

// Error is the error estimate of this node's coordinate: 1.5 before any
// sample, falling as samples agree.
func (c *Coordinates) Error() float64 { return c.client.GetCoordinate().Error }

// Stats are what the coordinate has taken in.
type CoordStats struct {
	Samples, Outliers uint64
	Peers             int // whose coordinate is held
}

// Stats says how many samples and outliers this node has seen.
func (c *Coordinates) Stats() CoordStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CoordStats{Samples: c.samples, Outliers: c.outliers, Peers: len(c.peers)}
}

// Measured records an RTT measured to p, whose coordinate is not known.
func (c *Coordinates) Measured(p peer.ID, rtt time.Duration, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keep(p, now).add(rtt)
}

func (pc *peerCoord) add(rtt time.Duration) {
	pc.rtts[pc.n%rttSamples] = rtt
	pc.n++
}

// RTT is the RTT measured to p: the median of its last samples.
func (c *Coordinates) RTT(p peer.ID) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pc, ok := c.peers[p]; ok {
		return pc.rtt()
	}
	return 0, false
}

// Sampled reports whether p's measured RTT stands on a full set of
// samples: the pinger then samples it less often.
func (c *Coordinates) Sampled(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := c.peers[p]
	return ok && pc.n >= rttSamples
}

// Observe records an RTT measured to p whose coordinate is other, updates
// this node's coordinate from the pair, and keeps other as p's. A
// coordinate of the wrong shape is refused; one wildly inconsistent with
// rtt is an outlier: p's claim is ignored, for this sample and for
// estimates, and this node's coordinate does not move. The RTT counts
// either way.
func (c *Coordinates) Observe(p peer.ID, other *coordinate.Coordinate, rtt time.Duration, now time.Time) error {
	own := c.client.GetCoordinate()
	if other == nil || !own.IsCompatibleWith(other) || !other.IsValid() {
		c.Measured(p, rtt, now)
		return fmt.Errorf("coordinate of %s: the wrong shape or not finite", p)
	}
	// A coordinate that puts its peer far beyond the RTT measured is a lie
	// or a peer far from settled; either way it must not pull this one.
	// Nearer than measured says something only once this node's own
	// coordinate has settled: every node starts at the origin.
	est := own.DistanceTo(other)
	outlier := est > outlierFactor*rtt+outlierSlack ||
		own.Error <= outlierTrust && other.Error <= EstimateMaxError && outlierFactor*est+outlierSlack < rtt
	c.mu.Lock()
	c.samples++
	pc := c.keep(p, now)
	pc.c, pc.outlier = other, outlier
	pc.add(rtt)
	if outlier {
		c.outliers++
	}
	c.mu.Unlock()
	if outlier {
		return fmt.Errorf("%w: %s claims a coordinate %s away, measured %s", ErrCoordOutlier, p,
			est.Round(time.Millisecond), rtt.Round(time.Millisecond))
	}
	_, err := c.client.Update(p.String(), other, rtt)
	return err
}

// keep returns p's entry, made if new, evicting the least recently seen
// peer past maxCoordPeers. Called with mu held.
func (c *Coordinates) keep(p peer.ID, now time.Time) *peerCoord {
	pc, ok := c.peers[p]
	if !ok {
		if len(c.peers) >= maxCoordPeers {
			var oldest peer.ID
			var at time.Time
			for q, e := range c.peers {
				if oldest == "" || e.seen.Before(at) {
					oldest, at = q, e.seen
				}
			}
			delete(c.peers, oldest)
			c.client.ForgetNode(oldest.String())
		}
		pc = &peerCoord{}
		c.peers[p] = pc
	}
	pc.seen = now
	return pc
}

// Forget drops what this node keeps of p: its coordinate and its samples.
func (c *Coordinates) Forget(p peer.ID) {
	c.mu.Lock()
	delete(c.peers, p)
	c.mu.Unlock()
	c.client.ForgetNode(p.String())
}

// Of returns p's coordinate as last learned over the exchange, unless it
// was an outlier.
func (c *Coordinates) Of(p peer.ID) (*coordinate.Coordinate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := c.peers[p]
	if !ok || pc.outlier || pc.c == nil {
		return nil, false
	}
	return pc.c, true
}

// Outlier reports whether p's last coordinate contradicted its RTT.
func (c *Coordinates) Outlier(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	pc, ok := c.peers[p]
	return ok && pc.outlier
}

// Estimate is the RTT this node's coordinate and other put between them,
// when both are settled enough (error at most EstimateMaxError).
func (c *Coordinates) Estimate(other *coordinate.Coordinate) (time.Duration, error) {
	own := c.client.GetCoordinate()
	if other == nil || !own.IsCompatibleWith(other) || !other.IsValid() || own.Error > EstimateMaxError || other.Error > EstimateMaxError {
		return 0, ErrCoordUnknown
	}
	return own.DistanceTo(other), nil
}

// EstimateTo is Estimate for p's coordinate: from the exchange, or else
// from fallback (an offer's signed coordinate, say; nil for none).
func (c *Coordinates) EstimateTo(p peer.ID, fallback *pb.NetworkCoordinate) (time.Duration, error) {
	var held *coordinate.Coordinate
	outlier := false
	c.mu.Lock() // one look: this runs for each unmeasured offer a match weighs
	if pc := c.peers[p]; pc != nil {
		held, outlier = pc.c, pc.outlier
	}
	c.mu.Unlock()
	switch {
	case outlier:
		return 0, ErrCoordOutlier
	case held != nil:
		return c.Estimate(held)
	case fallback == nil:
		return 0, ErrCoordUnknown
	}
	return c.Estimate(CoordFromProto(fallback))
}

// Nearness is how near p is: the RTT measured to it, or else the estimate
// from the coordinate it gave; false when neither is known.
func (c *Coordinates) Nearness(p peer.ID) (time.Duration, bool) {
	if d, ok := c.RTT(p); ok {
		return d, true
	}
	d, err := c.EstimateTo(p, nil)
	return d, err == nil
}

// PairRTT estimates the RTT between two other nodes from their
// coordinates (two providers' offers, say): unknown unless both are of
// the right shape and settled enough to estimate by.
func PairRTT(a, b *pb.NetworkCoordinate) (time.Duration, error) {
	if a == nil || b == nil {
		return 0, ErrCoordUnknown
	}
	ca, cb := CoordFromProto(a), CoordFromProto(b)
	if !ca.IsCompatibleWith(cb) || !ca.IsValid() || !cb.IsValid() || ca.Error > EstimateMaxError || cb.Error > EstimateMaxError {
		return 0, ErrCoordUnknown
	}
	return ca.DistanceTo(cb), nil
}

// CoordToProto is c on the wire.
func CoordToProto(c *coordinate.Coordinate) *pb.NetworkCoordinate {
	return &pb.NetworkCoordinate{Vec: append([]float64(nil), c.Vec...), Error: c.Error, Adjustment: c.Adjustment, Height: c.Height}
}

// CoordFromProto is a wire coordinate as serf's; check it first with
// market.CheckCoordinate.
func CoordFromProto(c *pb.NetworkCoordinate) *coordinate.Coordinate {
	return &coordinate.Coordinate{Vec: append([]float64(nil), c.GetVec()...), Error: c.GetError(), Adjustment: c.GetAdjustment(), Height: c.GetHeight()}
}

// ServeCoord answers CoordProtocol with own().
func ServeCoord(sv Server, own func() *coordinate.Coordinate) {
	sv.Serve(CoordProtocol, CoordLimits, func(_ context.Context, _ peer.ID, s network.Stream) error {
		b, err := proto.Marshal(CoordToProto(own()))
		if err != nil {
			return err
		}
		return msgio.NewVarintWriter(s).WriteMsg(b)
	})
}

// FetchCoord asks p for its coordinate: at most MaxCoordSize bytes, of
// the shape market.CheckCoordinate allows.
func FetchCoord(ctx context.Context, h host.Host, sw Swarm, p peer.ID) (*coordinate.Coordinate, error) {
	var got *pb.NetworkCoordinate
	_, err := exchange(ctx, h, sw, p, CoordProtocol, CoordDeadline, nil, func(r io.Reader) (int, error) {
		var err error
		got, err = readCoord(r)
		return 1, err
	})
	if err != nil {
		return nil, fmt.Errorf("coordinate of %s: %w", p, err)
	}
	return CoordFromProto(got), nil
}

// readCoord reads one coordinate answer and checks its shape.
func readCoord(r io.Reader) (*pb.NetworkCoordinate, error) {
	b, err := msgio.NewVarintReaderSize(r, MaxCoordSize).ReadMsg()
	if err != nil {
		return nil, err
	}
	c := new(pb.NetworkCoordinate)
	if err := market.Unmarshal(b, c); err != nil {
		return nil, err
	}
	if err := market.CheckCoordinate(c); err != nil {
		return nil, err
	}
	return c, nil
}
