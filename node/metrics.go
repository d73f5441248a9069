package node

import (
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
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
	m.reg.MustRegister(m.gossipReceived, m.leasesEnded, m.leaseSeconds, info, newReputationCollector(n),
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "idlegrid_coordinate_error",
			Help: "The error estimate of this node's network coordinate: 1.5 before any sample; RTTs are estimated from it at 1 or less.",
		}, n.coords.Error),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlegrid_coordinate_outliers_total",
			Help: "RTT samples refused because the peer's coordinate contradicted the RTT measured.",
		}, func() float64 { return float64(n.coords.Stats().Outliers) }),
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

// reliabilityBuckets are the upper bounds of the reliability histogram.
var reliabilityBuckets = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

// reputationCollector exports the distribution of this node's scores of
// its peers as providers, as last computed: a histogram rebuilt at each
// scrape from the published scores, so it costs nothing between scrapes.
type reputationCollector struct {
	n    *Node
	desc *prometheus.Desc
}

func newReputationCollector(n *Node) *reputationCollector {
	return &reputationCollector{n: n, desc: prometheus.NewDesc("idlegrid_reputation_reliability",
		"Reliability this node gives the peers it knows of as providers, as last computed.", nil, nil)}
}

func (c *reputationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *reputationCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.reputation == nil {
		return
	}
	counts := make(map[float64]uint64, len(reliabilityBuckets))
	var total uint64
	var sum float64
	c.n.reputation.scores().Each(func(_ peer.ID, sc reputation.Score) {
		total++
		sum += sc.Reliability
		for _, b := range reliabilityBuckets {
			if sc.Reliability <= b {
				counts[b]++
			}
		}
	})
	ch <- prometheus.MustNewConstHistogram(c.desc, total, sum, counts)
}
