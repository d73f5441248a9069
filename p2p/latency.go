package p2p

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// Pinger measures the round-trip time to every connected peer with libp2p
// ping, once per interval. ping records each RTT in the peerstore's latency
// EWMA, which is where the rest of idlegrid reads it.
type Pinger struct {
	h        host.Host
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewPinger returns a Pinger; it pings nothing until Start.
func NewPinger(h host.Host, interval time.Duration, log *slog.Logger) *Pinger {
	if log == nil {
		log = slog.Default()
	}
	return &Pinger{h: h, interval: interval, timeout: 10 * time.Second, log: log}
}

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
	for _, id := range p.h.Network().Peers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pingOnce(ctx, id)
		}()
	}
	wg.Wait()
}

// pingOnce sends one ping to id; the RTT lands in the peerstore.
func (p *Pinger) pingOnce(ctx context.Context, id peer.ID) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	select {
	case res := <-ping.Ping(ctx, p.h, id):
		if res.Error != nil {
			p.log.Debug("ping failed", "peer", id, "err", res.Error)
		}
	case <-ctx.Done():
	}
}
