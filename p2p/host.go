package p2p

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	tls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"
)

// HostConfig is everything NewHost needs. The zero value of an optional
// field means "libp2p's default" only where the comment says so.
type HostConfig struct {
	// Identity is the node's key; its peer ID is the node's name everywhere.
	Identity crypto.PrivKey
	// Swarm selects the PSK (pnet) for a private swarm.
	Swarm Swarm
	// ListenAddrs are bound one by one; any that fails fails NewHost.
	ListenAddrs []ma.Multiaddr
	// AnnounceAddrs, when set, replace the addresses the host advertises.
	AnnounceAddrs []ma.Multiaddr
	// AllowList, when non-empty, admits only these peers (connection gater).
	AllowList []peer.ID
	// ConnLow and ConnHigh are the connection manager's water marks, and
	// ConnHigh is a hard bound on connected peers too (see Bound);
	// ConnGrace protects new connections from trimming.
	ConnLow, ConnHigh int
	ConnGrace         time.Duration
	// Limits bound the resource manager.
	Limits Limits
	// UserAgent is sent in identify.
	UserAgent string
	// Registerer receives libp2p's Prometheus collectors; nil disables them.
	Registerer prometheus.Registerer
	// NAT is how the host gets through NATs; the zero value does nothing
	// of it (AutoNAT aside).
	NAT NATConfig
}

// NewHost builds a libp2p host for one swarm: TCP always, QUIC for the
// public swarm (pnet cannot protect QUIC, so a private swarm runs on TCP
// only), TLS then Noise (TLS first, as go-libp2p's defaults: its
// AES-GCM runs in hardware on the machines that rent GPUs, and bulk
// transfers ride it), yamux, the resource manager with explicit limits,
// a connection manager where only a Keeper's tags protect (BoundHost),
// libp2p ping, and for a private swarm its PSK and
// optional allow-list. Every listen address must bind, or NewHost fails
// with ErrListen naming the address.
func NewHost(cfg HostConfig) (host.Host, error) {
	if cfg.Identity == nil {
		return nil, fmt.Errorf("new host: no identity key")
	}
	rm, err := newResourceManager(cfg.Limits, cfg.Swarm, cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new host: %w", err)
	}
	cm, err := connmgr.NewConnManager(cfg.ConnLow, cfg.ConnHigh, connmgr.WithGracePeriod(cfg.ConnGrace))
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("new host: connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Identity),
		libp2p.NoListenAddrs,
		libp2p.Security(tls.ID, tls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.Ping(true),
		libp2p.UserAgent(cfg.UserAgent),
	}
	if cfg.Swarm.Private() {
		opts = append(opts, libp2p.PrivateNetwork(cfg.Swarm.PSK))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	if len(cfg.AllowList) > 0 {
		opts = append(opts, libp2p.ConnectionGater(NewAllowList(cfg.AllowList)))
	}
	if cfg.Registerer != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Registerer))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	var built hostRef // for the NAT parts that need the host
	nat, err := natOptions(cfg.NAT, cfg.Swarm, &built, cfg.Registerer)
	if err != nil {
		rm.Close()
		cm.Close()
		return nil, fmt.Errorf("new host: %w", err)
	}
	opts = append(opts, nat...)
	if len(cfg.AnnounceAddrs) > 0 {
		announce := cfg.AnnounceAddrs
		opts = append(opts, libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return announce }))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		cm.Close()
		return nil, fmt.Errorf("new host: %w", err)
	}
	built.set(h)
	for _, a := range cfg.ListenAddrs {
		if cfg.Swarm.Private() && IsQUIC(a) {
			h.Close()
			return nil, fmt.Errorf("%w on %s: a private swarm runs on TCP only (pnet cannot protect QUIC)", ErrListen, a)
		}
		if err := portFree(a); err != nil {
			h.Close()
			return nil, fmt.Errorf("%w on %s: %v", ErrListen, a, err)
		}
		if err := h.Network().Listen(a); err != nil {
			h.Close()
			return nil, fmt.Errorf("%w on %s: %v", ErrListen, a, err)
		}
	}
	bound := BoundHost(h, h.ConnManager(), Bound{High: cfg.ConnHigh, Grace: cfg.ConnGrace})
	if cfg.NAT.HolePunching {
		return newPunchingHost(bound), nil
	}
	return bound, nil
}

// IsQUIC reports whether a is a QUIC address.
func IsQUIC(a ma.Multiaddr) bool {
	for _, c := range a {
		if c.Protocol().Code == ma.P_QUIC || c.Protocol().Code == ma.P_QUIC_V1 {
			return true
		}
	}
	return false
}

// ParseAddrInfo parses a bootstrap address: a multiaddr that ends in
// /p2p/<peer ID>.
func ParseAddrInfo(s string) (peer.AddrInfo, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w %q: %v", ErrBootstrapAddr, s, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(a)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w %q: it must end in /p2p/<peer ID> (%v)", ErrBootstrapAddr, s, err)
	}
	return *ai, nil
}

// portFree binds a's TCP or UDP port without SO_REUSEPORT and lets it go.
// libp2p binds with SO_REUSEPORT (so outgoing connections can share the
// listen port, as NAT traversal wants), and the kernel then lets a second
// daemon bind the port another holds and splits the incoming connections
// between them; a plain bind fails while anyone holds the port, which is
// the refusal a user expects. Port 0 is always free.
func portFree(a ma.Multiaddr) error {
	ip, err := manet.ToIP(a)
	if err != nil {
		return nil // not an IP address: nothing to probe
	}
	if port, err := a.ValueForProtocol(ma.P_TCP); err == nil && port != "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), port))
		if err != nil {
			return fmt.Errorf("TCP port %s: %w", port, errors.Unwrap(err))
		}
		return l.Close()
	}
	if port, err := a.ValueForProtocol(ma.P_UDP); err == nil && port != "0" {
		c, err := net.ListenPacket("udp", net.JoinHostPort(ip.String(), port))
		if err != nil {
			return fmt.Errorf("UDP port %s: %w", port, errors.Unwrap(err))
		}
		return c.Close()
	}
	return nil
}
