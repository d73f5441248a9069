package config

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/geo"
	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Profiles a repository can be created with.
const (
	ProfileProvider  = "provider"
	ProfileRenter    = "renter"
	ProfileBootstrap = "bootstrap"
)

// Profiles lists the allowed profiles.
var Profiles = []string{ProfileProvider, ProfileRenter, ProfileBootstrap}

// Config is the repository's config.toml, one field per setting. Defaults
// come from DefaultConfig; Validate names the first bad field.
type Config struct {
	Profile    string           `toml:"profile" comment:"what this node is for: provider, renter or bootstrap"`
	Swarm      SwarmConfig      `toml:"swarm" comment:"the swarm this node joins"`
	Network    NetworkConfig    `toml:"network" comment:"libp2p listeners, bootstrap peers and connection limits"`
	NAT        NATConfig        `toml:"nat" comment:"getting through NATs: AutoNAT, relays, hole punching, port mapping"`
	DHT        DHTConfig        `toml:"dht" comment:"Kademlia DHT and rendezvous discovery"`
	Gossip     GossipConfig     `toml:"gossip" comment:"gossipsub on the swarm's offers, bids and evidence topics"`
	Resources  ResourcesConfig  `toml:"resources" comment:"libp2p resource manager ceilings"`
	API        APIConfig        `toml:"api" comment:"local HTTP API and Prometheus metrics, on 127.0.0.1 only"`
	Log        LogConfig        `toml:"log" comment:"logging through log/slog on stderr"`
	Provider   ProviderConfig   `toml:"provider" comment:"what this node sells, when it is a provider"`
	Jobs       JobsConfig       `toml:"jobs" comment:"how a provider runs and meters leased workloads"`
	Attest     AttestConfig     `toml:"attest" comment:"how this node verifies other providers' attestations"`
	Reputation ReputationConfig `toml:"reputation" comment:"how this node rates its peers from the receipts it can verify"`
	Settlement SettlementConfig `toml:"settlement" comment:"how leases are paid"`
	Datasets   DatasetsConfig   `toml:"datasets" comment:"datasets kept here by content address (idlegrid dataset)"`
}

// DatasetsConfig bounds the datasets a node keeps.
type DatasetsConfig struct {
	CacheGiB int `toml:"cache_gib" comment:"disk the datasets kept here may take, GiB, pinned and cached together: past it the cached ones used longest ago are evicted (never a pinned one, nor one a lease uses), and a dataset larger than it is refused"`
}

// DefaultDatasetsCacheGiB is datasets.cache_gib's default.
const DefaultDatasetsCacheGiB = 64

// ReputationConfig holds whose view of the swarm this node adopts.
type ReputationConfig struct {
	Seeds []string `toml:"seeds" comment:"peer IDs whose view of the swarm this node adopts: trust flows from them and from this node through the receipts; empty: the bootstrap peers, the swarm's allow-list, and the seeds the bootstrap peers' operators chose"`
}

// AttestConfig holds what a verifier trusts.
type AttestConfig struct {
	CCRootCert string `toml:"cc_root_cert" comment:"PEM file of NVIDIA's device identity root certificate, relative to the repository; with it, confidential-computing reports of H100/H200 GPUs are verified, without it shown as 'present, not verified'"`
}

// SwarmConfig names the swarm and, for a private one, its key and allow-list.
type SwarmConfig struct {
	Name      string   `toml:"name" comment:"swarm name: 'public', or a private swarm's own name (lower-case letters, digits, '-')"`
	KeyFile   string   `toml:"key_file" comment:"pre-shared key of a private swarm, relative to the repository; empty for the public swarm"`
	AllowList []string `toml:"allow_list" comment:"peer IDs admitted to a private swarm (bootstrap peers are admitted too); empty admits every key holder"`
}

// NetworkConfig holds the host's addresses and connection management.
type NetworkConfig struct {
	Listen       []string `toml:"listen" comment:"multiaddrs to listen on; a private swarm runs on TCP only"`
	Announce     []string `toml:"announce" comment:"multiaddrs to advertise instead of the listen addresses; empty advertises what the host detects"`
	Bootstrap    []string `toml:"bootstrap" comment:"bootstrap peers, each /ip4/…/tcp/…/p2p/<peer ID>; empty makes this node a first node"`
	ConnLow      int      `toml:"conn_low" comment:"connection manager low water mark: trimming stops here"`
	ConnHigh     int      `toml:"conn_high" comment:"the most peers the node holds: a connection past it starts a trim at once, and closes the least valued of the young ones if they alone exceed it"`
	ConnGrace    Duration `toml:"conn_grace" comment:"new connections are not trimmed for this long, unless they alone hold the node past conn_high"`
	DialTimeout  Duration `toml:"dial_timeout" comment:"limit for one dial to a bootstrap or discovered peer"`
	PingInterval Duration `toml:"ping_interval" comment:"how often each connected peer's round-trip time is measured"`
	NearPeers    int      `toml:"near_peers" comment:"the connected peers of least measured RTT that the connection manager never trims (0: none)"`
	RandomPeers  int      `toml:"random_peers" comment:"connected peers chosen at random that the connection manager never trims, so the bounded set spans the swarm (0: none; with near_peers at most conn_low)"`
	Location     string   `toml:"location" comment:"where this machine is: a country code (DE) or latitude,longitude (50.11,8.68); with it, a bid that requires a region refuses providers whose claimed country light could not reach in the RTT measured to them (empty: provider.country on a provider, else unknown)"`
}

// NATConfig is how the node gets through NATs (see p2p.NATConfig).
type NATConfig struct {
	Reachability  string   `toml:"reachability" comment:"auto (AutoNAT: peers try to dial back), public or private (you know which)"`
	PortMap       bool     `toml:"port_map" comment:"ask the router for a port mapping (UPnP IGD, NAT-PMP)"`
	HolePunching  bool     `toml:"hole_punching" comment:"turn a relayed connection into a direct one by hole punching (DCUtR)"`
	AutoRelay     bool     `toml:"auto_relay" comment:"while not publicly reachable, take reservations on relays among the swarm's peers and advertise the relayed addresses"`
	RelayService  bool     `toml:"relay_service" comment:"while publicly reachable, relay for the swarm's own peers within the limits below"`
	RelayReserve  int      `toml:"relay_reservations" comment:"reservations this relay holds at once"`
	RelayCircuits int      `toml:"relay_circuits" comment:"relayed connections open per peer"`
	RelayDuration Duration `toml:"relay_duration" comment:"a relayed connection is reset after this long"`
	RelayMiB      int      `toml:"relay_mib" comment:"MiB relayed each way on one connection before it is reset"`
}

// DHTConfig configures kad-dht and rendezvous discovery.
type DHTConfig struct {
	Mode                string   `toml:"mode" comment:"server (answers DHT queries; daemons) or client (queries only; light clients)"`
	RebootstrapInterval Duration `toml:"rebootstrap_interval" comment:"how often lost bootstrap peers are redialled (and the routing table refreshed after one was)"`
	FindInterval        Duration `toml:"find_interval" comment:"longest wait between rendezvous lookups for the swarm's peers"`
	SettledInterval     Duration `toml:"settled_find_interval" comment:"longest wait between rendezvous lookups once the node holds network.conn_low peers"`
	MaxPeers            int      `toml:"max_peers" comment:"most peers one rendezvous lookup returns; the nearest by estimated RTT are dialled first, up to network.conn_low connections"`
}

// GossipConfig configures gossipsub.
type GossipConfig struct {
	OutboundQueue    int      `toml:"outbound_queue" comment:"per-peer outbound message queue; pubsub's default of 32 drops bursts"`
	MaxMessageSize   int      `toml:"max_message_size" comment:"largest gossiped message in bytes"`
	PeerScoring      bool     `toml:"peer_scoring" comment:"gossipsub v1.1 peer scoring: penalise peers that relay invalid messages"`
	ValidatorTimeout Duration `toml:"validator_timeout" comment:"limit for validating one message"`
	BookOffers       int      `toml:"book_offers" comment:"offers the book holds, live or remembered; a full book refuses unknown issuers' new offers, and a peer in good standing, an attested provider or this node displaces the newest of them"`
	BookBids         int      `toml:"book_bids" comment:"bids the book holds, by the same rule"`
	Follow           []string `toml:"follow" comment:"GPU families whose offers and bids this node hears, such as [\"H100\", \"A100\"]: each family is a shard of the offers and bids topics, and a node hears only the shards it follows (a provider its own GPUs' families too; a renter asks the shards its bid names when it rents); empty: every family, on the swarm's whole offers and bids topics, as a node of the last version does"`
}

// MaxFollow is the most GPU families gossip.follow may name (p2p.MaxShards
// less the shards a provider's own GPUs and a bid for any GPU add).
const MaxFollow = 8

// ResourcesConfig bounds libp2p's resource manager.
type ResourcesConfig struct {
	MaxMemoryMiB    int `toml:"max_memory_mib" comment:"memory libp2p may reserve, in MiB"`
	MaxFDs          int `toml:"max_fds" comment:"file descriptors libp2p may use"`
	MaxConns        int `toml:"max_conns" comment:"connections, both directions"`
	MaxConnsInbound int `toml:"max_conns_inbound" comment:"inbound connections"`
	MaxStreams      int `toml:"max_streams" comment:"streams, both directions"`
}

// APIConfig configures the local HTTP API.
type APIConfig struct {
	Port int `toml:"port" comment:"HTTP port on 127.0.0.1 for the API and /metrics; 0 picks a free port"`
	// OpenMetrics lets a local scraper read /metrics without the token.
	OpenMetrics bool `toml:"open_metrics" comment:"serve GET /metrics without the API token (every other call but reads needs it)"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level      string            `toml:"level" comment:"default level: debug, info, warn or error"`
	Format     string            `toml:"format" comment:"text or json"`
	Subsystems map[string]string `toml:"subsystems" comment:"level per subsystem: node, p2p, api, or libp2p (all of libp2p) and a libp2p logger's own name such as dht or pubsub"`
}

// Default ports of a provider or bootstrap node.
const (
	DefaultP2PPort = 4001
	DefaultAPIPort = 5080
)

// DefaultConfig returns the defaults of a profile; the profile is not
// checked here (Validate does).
func DefaultConfig(profile string) Config {
	port := DefaultP2PPort
	if profile == ProfileRenter {
		port = 0 // a renter accepts no inbound work: any free port will do
	}
	c := Config{
		Profile:    profile,
		Swarm:      SwarmConfig{Name: p2p.PublicSwarm, AllowList: []string{}},
		Reputation: ReputationConfig{Seeds: []string{}},
		Settlement: DefaultSettlement(),
		Network: NetworkConfig{
			Listen:       ListenAddrs("0.0.0.0", port, true),
			Announce:     []string{},
			Bootstrap:    []string{},
			ConnLow:      32,
			ConnHigh:     64,
			ConnGrace:    Dur(20 * time.Second),
			DialTimeout:  Dur(15 * time.Second),
			PingInterval: Dur(30 * time.Second),
			NearPeers:    8,
			RandomPeers:  8,
		},
		NAT: NATConfig{
			Reachability: p2p.ReachAuto, PortMap: true, HolePunching: true, AutoRelay: true, RelayService: true,
			RelayReserve: p2p.DefaultRelayLimits.Reservations, RelayCircuits: p2p.DefaultRelayLimits.CircuitsPerPeer,
			RelayDuration: Dur(p2p.DefaultRelayLimits.Duration), RelayMiB: int(p2p.DefaultRelayLimits.Bytes >> 20),
		},
		DHT: DHTConfig{
			Mode:                DHTServer,
			RebootstrapInterval: Dur(5 * time.Minute),
			FindInterval:        Dur(time.Minute),
			SettledInterval:     Dur(15 * time.Minute),
			MaxPeers:            64,
		},
		Gossip: GossipConfig{
			OutboundQueue:    1024,
			MaxMessageSize:   1 << 20,
			PeerScoring:      true,
			ValidatorTimeout: Dur(2 * time.Second),
			BookOffers:       market.DefaultBookLimits().Offers,
			BookBids:         market.DefaultBookLimits().Bids,
		},
		Resources: ResourcesConfig{
			MaxMemoryMiB:    int(p2p.DefaultLimits.MaxMemory >> 20),
			MaxFDs:          p2p.DefaultLimits.MaxFDs,
			MaxConns:        p2p.DefaultLimits.MaxConns,
			MaxConnsInbound: p2p.DefaultLimits.MaxConnsInbound,
			MaxStreams:      p2p.DefaultLimits.MaxStreams,
		},
		API: APIConfig{Port: DefaultAPIPort, OpenMetrics: true},
		Log: LogConfig{
			Level:      "info",
			Format:     "text",
			Subsystems: map[string]string{"libp2p": "warn", "dht/rtrefreshmanager": "error"},
		},
		Provider: DefaultProviderConfig(),
		Jobs:     DefaultJobsConfig(),
		Datasets: DatasetsConfig{CacheGiB: DefaultDatasetsCacheGiB},
	}
	switch profile {
	case ProfileRenter:
		c.DHT.Mode = DHTClient
		c.Network.ConnLow, c.Network.ConnHigh = 16, 32
		// A renter dials out: it needs no relay of its own, and serves none.
		c.NAT.AutoRelay, c.NAT.RelayService = false, false
	case ProfileBootstrap:
		c.Network.ConnLow, c.Network.ConnHigh = 500, 2000
		c.Resources.MaxConns, c.Resources.MaxConnsInbound = 4096, 3072
		c.Resources.MaxFDs = 8192
		c.Resources.MaxMemoryMiB = 2048
	}
	return c
}

// ListenAddrs returns the TCP (and, with quic, QUIC) listen multiaddrs for
// an IPv4 address and port.
func ListenAddrs(ip string, port int, quic bool) []string {
	addrs := []string{fmt.Sprintf("/ip4/%s/tcp/%d", ip, port)}
	if quic {
		addrs = append(addrs, fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", ip, port))
	}
	return addrs
}

// DHT modes.
const (
	DHTServer = "server"
	DHTClient = "client"
)

// Levels lists the allowed log levels.
var Levels = []string{"debug", "info", "warn", "error"}

var subsystemRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_./-]{0,63}$`)

// Validate checks every field and returns a *FieldError for the first bad
// one, naming the field, its value and what is allowed.
func (c *Config) Validate() error {
	checks := []func() error{
		func() error { return oneOf("profile", c.Profile, Profiles) },
		c.validateSwarm,
		c.validateNetwork,
		c.validateNAT,
		c.validateDHT,
		c.validateGossip,
		c.validateResources,
		func() error { return intRange("api.port", c.API.Port, 0, 65535) },
		c.validateLog,
		c.Provider.validate,
		c.validateJobs,
		c.validateReputation,
		c.validateSettlement,
		func() error { return intRange("datasets.cache_gib", c.Datasets.CacheGiB, 1, 1<<20) },
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateSwarm() error {
	s := c.Swarm
	if err := p2p.ValidateSwarmName(s.Name); err != nil {
		return FieldErr("swarm.name", s.Name, "1-63 lower-case letters, digits and '-', starting with a letter or digit")
	}
	if s.KeyFile != "" && s.Name == p2p.PublicSwarm {
		return FieldErr("swarm.name", s.Name, "a name of its own for a private swarm (swarm.key_file is set), not 'public'")
	}
	for i, id := range s.AllowList {
		if _, err := peer.Decode(id); err != nil {
			return FieldErr(fmt.Sprintf("swarm.allow_list[%d]", i), id, "a peer ID such as 12D3KooW… (see `idlegrid id`)")
		}
	}
	return nil
}

func (c *Config) validateReputation() error {
	for i, id := range c.Reputation.Seeds {
		if _, err := peer.Decode(id); err != nil {
			return FieldErr(fmt.Sprintf("reputation.seeds[%d]", i), id, "a peer ID such as 12D3KooW… (see `idlegrid id`)")
		}
	}
	return nil
}

func (c *Config) validateNetwork() error {
	n := c.Network
	for i, a := range n.Listen {
		addr, err := ma.NewMultiaddr(a)
		if err != nil {
			return FieldErr(fmt.Sprintf("network.listen[%d]", i), a, "a multiaddr such as /ip4/0.0.0.0/tcp/4001")
		}
		if c.Swarm.KeyFile != "" && p2p.IsQUIC(addr) {
			return FieldErr(fmt.Sprintf("network.listen[%d]", i), a, "TCP addresses only in a private swarm (pnet cannot protect QUIC)")
		}
	}
	for i, a := range n.Announce {
		if _, err := ma.NewMultiaddr(a); err != nil {
			return FieldErr(fmt.Sprintf("network.announce[%d]", i), a, "a multiaddr such as /ip4/203.0.113.7/tcp/4001")
		}
	}
	for i, a := range n.Bootstrap {
		if _, err := p2p.ParseAddrInfo(a); err != nil {
			return FieldErr(fmt.Sprintf("network.bootstrap[%d]", i), a, "a multiaddr ending in /p2p/<peer ID>, such as /ip4/198.51.100.1/tcp/4001/p2p/12D3KooW…")
		}
	}
	if err := intRange("network.conn_low", n.ConnLow, 1, 100000); err != nil {
		return err
	}
	if err := intRange("network.conn_high", n.ConnHigh, n.ConnLow, 100000); err != nil {
		return err
	}
	if err := durRange("network.conn_grace", n.ConnGrace, 0, 10*time.Minute); err != nil {
		return err
	}
	if err := durRange("network.dial_timeout", n.DialTimeout, time.Second, 5*time.Minute); err != nil {
		return err
	}
	if err := intRange("network.near_peers", n.NearPeers, 0, n.ConnLow); err != nil {
		return err
	}
	if err := intRange("network.random_peers", n.RandomPeers, 0, n.ConnLow-n.NearPeers); err != nil {
		return err
	}
	if n.Location != "" {
		if _, err := geo.ParsePlace(n.Location); err != nil {
			return FieldErr("network.location", n.Location, "a country code such as DE, or latitude,longitude such as 50.11,8.68")
		}
	}
	return durRange("network.ping_interval", n.PingInterval, time.Second, time.Hour)
}

func (c *Config) validateNAT() error {
	n := c.NAT
	if err := oneOf("nat.reachability", n.Reachability, []string{p2p.ReachAuto, p2p.ReachPublic, p2p.ReachPrivate}); err != nil {
		return err
	}
	if err := intRange("nat.relay_reservations", n.RelayReserve, 1, 1<<16); err != nil {
		return err
	}
	if err := intRange("nat.relay_circuits", n.RelayCircuits, 1, 1024); err != nil {
		return err
	}
	if err := durRange("nat.relay_duration", n.RelayDuration, 10*time.Second, 24*time.Hour); err != nil {
		return err
	}
	return intRange("nat.relay_mib", n.RelayMiB, 1, 1<<20)
}

func (c *Config) validateDHT() error {
	d := c.DHT
	if err := oneOf("dht.mode", d.Mode, []string{DHTServer, DHTClient}); err != nil {
		return err
	}
	if err := durRange("dht.rebootstrap_interval", d.RebootstrapInterval, 10*time.Second, 24*time.Hour); err != nil {
		return err
	}
	if err := durRange("dht.find_interval", d.FindInterval, time.Second, 24*time.Hour); err != nil {
		return err
	}
	if err := durRange("dht.settled_find_interval", d.SettledInterval, d.FindInterval.Std(), 24*time.Hour); err != nil {
		return err
	}
	return intRange("dht.max_peers", d.MaxPeers, 1, 10000)
}

func (c *Config) validateGossip() error {
	g := c.Gossip
	if err := intRange("gossip.outbound_queue", g.OutboundQueue, 32, 1<<16); err != nil {
		return err
	}
	if err := intRange("gossip.max_message_size", g.MaxMessageSize, 1<<10, 16<<20); err != nil {
		return err
	}
	if err := intRange("gossip.book_offers", g.BookOffers, 16, 10_000_000); err != nil {
		return err
	}
	if err := intRange("gossip.book_bids", g.BookBids, 16, 10_000_000); err != nil {
		return err
	}
	if len(g.Follow) > MaxFollow {
		return FieldErr("gossip.follow", g.Follow, fmt.Sprintf("at most %d GPU families", MaxFollow))
	}
	for _, f := range g.Follow {
		if _, err := gpus.Default().Resolve(f); err != nil {
			return FieldErr("gossip.follow", f, "a GPU family or model the catalog knows, such as \"H100\" or \"RTX 4090\" ("+err.Error()+")")
		}
	}
	return durRange("gossip.validator_timeout", g.ValidatorTimeout, 100*time.Millisecond, time.Minute)
}

func (c *Config) validateResources() error {
	r := c.Resources
	if err := intRange("resources.max_memory_mib", r.MaxMemoryMiB, 64, 1<<20); err != nil {
		return err
	}
	if err := intRange("resources.max_fds", r.MaxFDs, 64, 1<<20); err != nil {
		return err
	}
	if err := intRange("resources.max_conns", r.MaxConns, 1, 1<<20); err != nil {
		return err
	}
	if err := intRange("resources.max_conns_inbound", r.MaxConnsInbound, 0, r.MaxConns); err != nil {
		return err
	}
	return intRange("resources.max_streams", r.MaxStreams, 16, 1<<22)
}

func (c *Config) validateLog() error {
	if err := oneOf("log.level", c.Log.Level, Levels); err != nil {
		return err
	}
	if err := oneOf("log.format", c.Log.Format, []string{"text", "json"}); err != nil {
		return err
	}
	for name, lvl := range c.Log.Subsystems {
		if !subsystemRE.MatchString(name) {
			return FieldErr("log.subsystems", name, "subsystem names of lower-case letters, digits, '_', '.', '/' and '-'")
		}
		if err := oneOf("log.subsystems."+name, lvl, Levels); err != nil {
			return err
		}
	}
	return nil
}

func oneOf(field, v string, allowed []string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return FieldErr(field, v, fmt.Sprintf("one of %v", allowed))
}

func intRange(field string, v, lo, hi int) error {
	if v >= lo && v <= hi {
		return nil
	}
	return FieldErr(field, v, fmt.Sprintf("%d to %d", lo, hi))
}

func durRange(field string, v Duration, lo, hi time.Duration) error {
	if v.Std() >= lo && v.Std() <= hi {
		return nil
	}
	return FieldErr(field, v, fmt.Sprintf("%s to %s", lo, hi))
}
