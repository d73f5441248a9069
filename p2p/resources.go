package p2p

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits are the resource manager's system-wide ceilings. libp2p's scaled
// defaults fill in the per-peer, per-protocol and per-service limits below
// them, scaled to MaxMemory and MaxFDs.
type Limits struct {
	MaxMemory       int64 // bytes all of libp2p may reserve
	MaxFDs          int   // file descriptors for connections
	MaxConns        int   // connections, both directions
	MaxConnsInbound int   // inbound connections
	MaxStreams      int   // streams, both directions
}

// DefaultLimits suit a provider daemon on a server: 1 GiB, 1024 fds,
// 1024 connections (512 inbound), 8192 streams.
var DefaultLimits = Limits{
	MaxMemory:       1 << 30,
	MaxFDs:          1024,
	MaxConns:        1024,
	MaxConnsInbound: 512,
	MaxStreams:      8192,
}

func (l Limits) concrete(s Swarm) rcmgr.ConcreteLimitConfig {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	addServedLimits(&scaling)
	addExchangeLimits(&scaling, s)
	scaled := scaling.Scale(l.MaxMemory, l.MaxFDs)
	system := rcmgr.ResourceLimits{
		Memory:       rcmgr.LimitVal64(l.MaxMemory),
		FD:           rcmgr.LimitVal(l.MaxFDs),
		Conns:        rcmgr.LimitVal(l.MaxConns),
		ConnsInbound: rcmgr.LimitVal(l.MaxConnsInbound),
		Streams:      rcmgr.LimitVal(l.MaxStreams),
	}
	return rcmgr.PartialLimitConfig{System: system}.Build(scaled)
}

func newResourceManager(l Limits, s Swarm, reg prometheus.Registerer) (network.ResourceManager, error) {
	var opts []rcmgr.Option
	if reg != nil {
		rcmgr.MustRegisterWith(reg)
		str, err := rcmgr.NewStatsTraceReporter()
		if err != nil {
			return nil, fmt.Errorf("resource manager metrics: %w", err)
		}
		opts = append(opts, rcmgr.WithTraceReporter(str))
	} else {
		opts = append(opts, rcmgr.WithMetricsDisabled())
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(l.concrete(s)), opts...)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	return rm, nil
}

// servedLimits are the limits of every protocol this package serves.
func servedLimits() []StreamLimits {
	return []StreamLimits{QuoteLimits, LeaseLimits, JobLimits, AttestLimits, BookLimits, BookDigestLimits, ReceiptLimits, EvidenceLimits, ChainLimits, SeedLimits}
}

// addServedLimits gives each served protocol's service scope its limits:
// a peer may hold twice the streams Server.Serve lets it use (a closed
// stream stays in its scope until both sides have closed it), with the
// memory their reservations take.
func addServedLimits(c *rcmgr.ScalingLimitConfig) {
	for _, l := range servedLimits() {
		service := rcmgr.BaseLimit{StreamsInbound: 256, StreamsOutbound: 256, Streams: 512, Memory: 64 << 20}
		c.AddServiceLimit(l.Service, service, rcmgr.BaseLimitIncrease{StreamsInbound: 256, StreamsOutbound: 256, Streams: 512, Memory: 64 << 20})
		perPeer := rcmgr.BaseLimit{StreamsInbound: 2 * l.PerPeer, StreamsOutbound: 64, Streams: 2*l.PerPeer + 64, Memory: int64(2*l.PerPeer*l.Memory) + 1<<20}
		c.AddServicePeerLimit(l.Service, perPeer, rcmgr.BaseLimitIncrease{})
	}
}

// ExchangeProtocol is the swarm's bitswap (node/data's exchange of
// datasets' blocks): bitswap 1.2.0 under the swarm's prefix, which only
// the swarm's peers speak.
func (s Swarm) ExchangeProtocol() protocol.ID {
	return s.DHTPrefix() + "/ipfs/bitswap/1.2.0"
}

// Bounds of the exchange's streams. Bitswap keeps one stream a peer for
// the messages it sends (a message is at most 4 MiB), and opens another
// when one breaks.
var (
	// ExchangePeerLimit: a peer holds 8 streams each way and 16 MiB.
	ExchangePeerLimit = rcmgr.BaseLimit{StreamsInbound: 8, StreamsOutbound: 8, Streams: 16, Memory: 16 << 20}
	// ExchangeLimit: all peers together, 1,024 streams each way.
	ExchangeLimit = rcmgr.BaseLimit{StreamsInbound: 1024, StreamsOutbound: 1024, Streams: 2048, Memory: 256 << 20}
)

// addExchangeLimits bounds the exchange's protocol in the resource
// manager, as every served protocol is.
func addExchangeLimits(c *rcmgr.ScalingLimitConfig, s Swarm) {
	p := s.ExchangeProtocol()
	c.AddProtocolLimit(p, ExchangeLimit, rcmgr.BaseLimitIncrease{})
	c.AddProtocolPeerLimit(p, ExchangePeerLimit, rcmgr.BaseLimitIncrease{})
}
