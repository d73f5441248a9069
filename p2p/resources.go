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
