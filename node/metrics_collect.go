package node

import (
	"context"
	"time"

	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// What the node holds, read at each scrape: nothing is kept for metrics
// between scrapes.

// nodeGauges are the gauges read from one part of the node each; a part
// not started reads as zero.
func nodeGauges(n *Node) []prometheus.Collector {
	gauges := []prometheus.Collector{
		gauge("idlegrid_leases_running", "Leases this provider supervises now.", func() float64 {
			if n.leases == nil {
				return 0
			}
			return float64(n.leases.LiveCount())
		}),
		gauge("idlegrid_uptime_seconds", "Seconds since the node started.", func() float64 { return n.clock.Since(n.started).Seconds() }),
		gauge("idlegrid_connected_peers", "Peers with at least one open connection.", func() float64 {
			if n.host == nil {
				return 0
			}
			return float64(len(n.host.Network().Peers()))
		}),
		gauge("idlegrid_dht_routing_table_peers", "Peers in the DHT routing table.", func() float64 {
			if n.disc == nil {
				return 0
			}
			return float64(n.disc.DHT().RoutingTable().Size())
		}),
		gauge("idlegrid_coordinate_error",
			"The error estimate of this node's network coordinate: 1.5 before any sample; RTTs are estimated from it at 1 or less.", n.coords.Error),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlegrid_coordinate_outliers_total",
			Help: "RTT samples refused because the peer's coordinate contradicted the RTT measured.",
		}, func() float64 { return float64(n.coords.Stats().Outliers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlegrid_gossip_router_reconnects_total",
			Help: "Connected peers closed and dialled again because the gossip router had lacked them for 5 s on topics they follow.",
		}, func() float64 {
			if n.gossip == nil {
				return 0
			}
			return float64(n.gossip.RouterRepairs().Reconnected)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "idlegrid_conn_evictions_total",
			Help: "Peers the hard connection bound closed, each when a new connection took the node past its high-water mark.",
		}, func() float64 {
			if n.host == nil {
				return 0
			}
			return float64(p2p.BoundEvictions(n.host))
		}),
		gauge("idlegrid_offers_held", "Live offers in this node's book, its own included.", func() float64 {
			if n.market == nil {
				return 0
			}
			return float64(n.market.Snapshot().Len())
		}),
		gauge("idlegrid_bids_held", "Live bids in this node's book, its own included.", func() float64 {
			if n.market == nil {
				return 0
			}
			return float64(n.market.Snapshot().NumBids())
		}),
	}
	for _, kind := range p2p.TopicKinds {
		gauges = append(gauges, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
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
	return gauges
}

// gauge is a gauge read by f at each scrape.
func gauge(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// reliabilityBuckets are the upper bounds of the reliability histogram.
var reliabilityBuckets = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

// reputationCollector exports the distribution of this node's scores of
// its peers as providers, as last computed: a histogram rebuilt at each
// scrape from the published scores, so it costs nothing between scrapes.
// Its count is the number of peers scored.
type reputationCollector struct {
	n    *Node
	desc *prometheus.Desc
}

func newReputationCollector(n *Node) *reputationCollector {
	return &reputationCollector{n: n, desc: prometheus.NewDesc("idlegrid_reputation_reliability",
		"Reliability this node gives the peers it knows of as providers, as last computed; the count is the peers scored.", nil, nil)}
}

func (c *reputationCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *reputationCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.reputation == nil {
		return
	}
	counts := make(map[float64]uint64, len(reliabilityBuckets))
	var total uint64
	var sum float64
	c.n.reputation.Scores().Each(func(_ peer.ID, sc reputation.Score) {
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

// validatorCollector exports the gossip validator's verdicts, by topic
// kind, verdict and reason (p2p.MarketValidator.EachVerdict): a fixed set
// of series, counted by the validator itself.
type validatorCollector struct {
	n    *Node
	desc *prometheus.Desc
}

func newValidatorCollector(n *Node) *validatorCollector {
	return &validatorCollector{n: n, desc: prometheus.NewDesc("idlegrid_validator_messages_total",
		"Market messages this node's validator judged, gossiped (its own included) or synced, by topic kind, result (accept, reject, ignore) and reason.",
		[]string{"topic", "result", "reason"}, nil)}
}

func (c *validatorCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *validatorCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.market == nil || c.n.market.Validator == nil {
		return
	}
	c.n.market.Validator.EachVerdict(func(topic, result, reason string, n int64) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), topic, result, reason)
	})
}

// leaseCollector exports the GPUs this provider offers and those its
// running leases hold, as the status summary counts them.
type leaseCollector struct {
	n               *Node
	offered, leased *prometheus.Desc
}

func newLeaseCollector(n *Node) *leaseCollector {
	return &leaseCollector{n: n,
		offered: prometheus.NewDesc("idlegrid_gpus_offered", "GPUs this provider's calendars sell.", nil, nil),
		leased:  prometheus.NewDesc("idlegrid_gpus_leased", "GPUs this provider's running leases hold.", nil, nil),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.offered; ch <- c.leased }

// leaseScrapeTimeout bounds reading the lease records at a scrape.
const leaseScrapeTimeout = 5 * time.Second

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	var offered, leased float64
	if c.n.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), leaseScrapeTimeout)
		defer cancel()
		sum := c.n.leaseSummary(ctx)
		offered, leased = float64(sum.GPUsOffered), float64(sum.GPUsLeased)
	}
	ch <- prometheus.MustNewConstMetric(c.offered, prometheus.GaugeValue, offered)
	ch <- prometheus.MustNewConstMetric(c.leased, prometheus.GaugeValue, leased)
}
