package p2p

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// Pinger measures the round-trip time to connected peers with libp2p
// ping. ping records each RTT in the peerstore's latency EWMA. With
// coordinates (Track), a sample is the least RTT of a few echoes, kept
// there (Coordinates.RTT, the median of the last samples), and the Pinger
// asks each peer pinged for its network coordinate and feeds the pair to
// this node's. Without coordinates it pings every connected peer once per
// interval; with them, a peer until its RTT stands on a full set of
// samples and this node's coordinate error is at most PingSettledError,
// and then once every SettledEvery intervals: a settled
// coordinate needs only a trickle of samples, and pings are most of what
// a quiet node sends.
type Pinger struct {
	h        host.Host
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	coords   *Coordinates // nil: none kept
	swarm    Swarm

	// SettledEvery is how many intervals apart a peer whose RTT and
	// coordinate this node has sampled enough is sampled again (default
	// DefaultSettledEvery; 1 samples every connected peer every round).
	// Set it before Start.
	SettledEvery int

	mu   sync.Mutex
	last map[peer.ID]time.Time // when each connected peer was last sampled

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewPinger returns a Pinger; it pings nothing until Start.
func NewPinger(h host.Host, interval time.Duration, log *slog.Logger) *Pinger {
	if log == nil {
		log = slog.Default()
	}
	return &Pinger{h: h, interval: interval, timeout: 10 * time.Second, log: log, last: map[peer.ID]time.Time{}, SettledEvery: DefaultSettledEvery}
}

// DefaultSettledEvery is Pinger.SettledEvery's default.
const DefaultSettledEvery = 4

// PingSettledError is the coordinate error at or below which the Pinger
// eases off peers it has sampled enough; above it, a node still finding
// its place samples every peer every round.
const PingSettledError = 0.5

// echoesPerSample is how many pings one sample takes the least RTT of.
const echoesPerSample = 3

// Track has each ping also update coords with the peer's coordinate,
// asked for in swarm. Call it before Start.
func (p *Pinger) Track(coords *Coordinates, swarm Swarm) { p.coords, p.swarm = coords, swarm }

// Start runs the ping loop until Close. The first round runs at once.
func (p *Pinger) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(1)
	go p.loop(ctx)
}

// Close stops the loop and waits for it.
func (p *Pinger) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

func (p *Pinger) loop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Pinger) round(ctx context.Context) {
	var wg sync.WaitGroup
	for _, id := range p.due(time.Now()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Sample(ctx, id)
		}()
	}
	wg.Wait()
}

// due returns the connected peers to sample in the round starting at now,
// and forgets when it last sampled peers no longer connected.
func (p *Pinger) due(now time.Time) []peer.ID {
	peers := p.h.Network().Peers()
	if p.coords == nil {
		return peers
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	connected := make(map[peer.ID]bool, len(peers))
	var out []peer.ID
	settled := p.coords.Error() <= PingSettledError
	for _, id := range peers {
		connected[id] = true
		// Half an interval's slack: a round runs late by the time its
		// slowest peer took.
		if last, ok := p.last[id]; ok && settled && p.coords.Sampled(id) && now.Sub(last) < time.Duration(p.SettledEvery)*p.interval-p.interval/2 {
			continue
		}
		p.last[id] = now
		out = append(out, id)
	}
	for id := range p.last {
		if !connected[id] {
			delete(p.last, id)
		}
	}
	return out
}

// Sample sends one ping to id; the RTT lands in the peerstore, and with
// the peer's coordinate (asked for meanwhile) in this node's coordinate.
// Rounds sample every connected peer; a caller samples others (a
// candidate it may lease from) through it.
func (p *Pinger) Sample(ctx context.Context, id peer.ID) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	type answer struct {
		c   *coordinate.Coordinate
		err error
	}
	var coord chan answer
	if p.coords != nil {
		coord = make(chan answer, 1)
		go func() {
			c, err := FetchCoord(ctx, p.h, p.swarm, id)
			coord <- answer{c, err}
		}()
	}
	// The least of a few echoes on one stream: queues and schedulers only
	// ever add delay.
	var rtt time.Duration
	results := ping.Ping(ctx, p.h, id)
	for range echoesPerSample {
		select {
		case res := <-results:
			if res.Error != nil {
				p.log.Debug("ping failed", "peer", id, "err", res.Error)
				return
			}
			if rtt == 0 || res.RTT < rtt {
				rtt = res.RTT
			}
		case <-ctx.Done():
			return
		}
	}
	if coord == nil {
		return
	}
	a := <-coord
	if a.err == nil {
		a.err = p.coords.Observe(id, a.c, rtt, time.Now())
	} else {
		p.coords.Measured(id, rtt, time.Now())
	}
	if a.err != nil {
		p.log.Debug("coordinate not updated", "peer", id, "err", a.err)
	}
}
