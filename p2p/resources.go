package p2p

import (
	"fmt"

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

func (l Limits) concrete() rcmgr.ConcreteLimitConfig {
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	addServedLimits(&scaling)
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

func newResourceManager(l Limits, reg prometheus.Registerer) (network.ResourceManager, error) {
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
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(l.concrete()), opts...)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	return rm, nil
}

// servedLimits are the limits of every protocol this package serves.
func servedLimits() []StreamLimits {
	return []StreamLimits{QuoteLimits, LeaseLimits, JobLimits, AttestLimits, BookLimits, ReceiptLimits, EvidenceLimits, ChainLimits, SeedLimits}
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
