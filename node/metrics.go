package node

import (
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is the node's own Prometheus registry: libp2p's collectors
// register into it through the host, and idlegrid's own are below.
type metrics struct {
	reg            *prometheus.Registry
	gossipReceived *prometheus.CounterVec
	// leasesEnded counts leases ended, by side and state; leaseSeconds
	// the seconds metered on their receipts.
	leasesEnded  *prometheus.CounterVec
	leaseSeconds *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		gossipReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlegrid_gossip_messages_received_total",
			Help: "Gossip messages accepted and delivered, by topic kind.",
		}, []string{"topic"}),
		leasesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlegrid_leases_ended_total",
			Help: "Leases ended, by this node's role and the state they ended in.",
		}, []string{"role", "state"}),
		leaseSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlegrid_lease_metered_seconds_total",
			Help: "Seconds metered on the receipts of ended leases, by this node's role.",
		}, []string{"role"}),
	}
	if n.opts.ProcessMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "idlegrid_info",
		Help:        "Always 1; the labels say which node this is.",
		ConstLabels: prometheus.Labels{"version": n.opts.Version, "swarm": n.swarm.ID(), "mode": n.Mode()},
	})
	info.Set(1)
	m.reg.MustRegister(m.gossipReceived, m.leasesEnded, m.leaseSeconds, info,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlegrid_leases_running",
			Help: "Leases this provider supervises now.",
		}, func() float64 {
			if n.leases == nil {
				return 0
			}
			return float64(n.leases.liveCount())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlegrid_uptime_seconds",
			Help: "Seconds since the node started.",
		}, func() float64 { return n.clock.Since(n.started).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlegrid_connected_peers",
			Help: "Peers with at least one open connection.",
		}, func() float64 {
			if n.host == nil {
				return 0
			}
			return float64(len(n.host.Network().Peers()))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlegrid_dht_routing_table_peers",
			Help: "Peers in the DHT routing table.",
		}, func() float64 {
			if n.disc == nil {
				return 0
			}
			return float64(n.disc.DHT().RoutingTable().Size())
		}),
	)
	for _, kind := range p2p.TopicKinds {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "idlegrid_gossip_mesh_peers",
			Help:        "Peers in this node's gossipsub mesh, by topic kind.",
			ConstLabels: prometheus.Labels{"topic": kind},
		}, func() float64 {
			if n.gossip == nil {
				return 0
			}
			return float64(len(n.gossip.Mesh(kind)))
		}))
	}
	return m
}

// leaseEnded counts a lease's end, by side and state, and its metered
// seconds.
func (m *metrics) leaseEnded(rec *records.Lease, rc *pb.Receipt) {
	m.leasesEnded.WithLabelValues(rec.Role, rec.State).Inc()
	m.leaseSeconds.WithLabelValues(rec.Role).Add(float64(rc.MeteredSeconds))
}

// received counts a gossip message delivered on a topic kind.
func (m *metrics) received(kind string) { m.gossipReceived.WithLabelValues(kind).Inc() }
