package node

import (
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is the node's own Prometheus registry: libp2p's collectors
// register into it through the host, and idlegrid's own are below. What
// happens counts as it happens, through the methods below, which are
// safe on a nil *metrics (a part built without one counts nothing); what
// the node holds is read at each scrape (metrics_collect.go).
//
// Every label takes its values from a fixed set named here, or from this
// node's own configuration (a currency is that of this node's offer or
// bid), never from what a peer sends; the fixed ones start at zero, so a
// series exists before its first event and rate() sees the first one.
type metrics struct {
	reg            *prometheus.Registry
	gossipReceived *prometheus.CounterVec
	// leasesEnded counts leases ended, by side and state; leaseSeconds
	// the seconds metered on their receipts; earned and spent the amounts
	// settled, by currency.
	leasesEnded   *prometheus.CounterVec
	leaseSeconds  *prometheus.CounterVec
	earned, spent *prometheus.CounterVec
	// A provider's work: the offers it published, the bids it quoted and
	// those it did not, the challenges it answered, and the failures of
	// its executor.
	offersPublished *prometheus.CounterVec
	quotesSent      prometheus.Counter
	bidsUnquoted    *prometheus.CounterVec
	attestServed    *prometheus.CounterVec
	executorErrors  *prometheus.CounterVec
	// challenges counts the attestation challenges this node made of
	// providers, by outcome.
	challenges *prometheus.CounterVec
}

// Label values of the node's own metrics.
const (
	// offers_published kind
	publishedOffer      = "offer"
	publishedWithdrawal = "withdrawal"
	// bids_unquoted reason
	unquotedQueueFull   = "queue_full"  // the relay's queue was full
	unquotedNoFit       = "no_fit"      // the provider's offer does not fit the bid
	unquotedUnsigned    = "unsigned"    // the quote could not be signed
	unquotedUndelivered = "undelivered" // the bidder was not reached
	// attestations_served result
	servedOK     = "ok"
	servedFailed = "failed"
	// attestation_challenges result
	challengeVerified   = "verified"   // a fresh document covering the offer
	challengeFailed     = "failed"     // a document that does not verify
	challengeUncovered  = "uncovered"  // verified, but the offer claims more
	challengeUnanswered = "unanswered" // no answer came
	// executor_errors op
	execCheck  = "check"  // checking a proposed lease's spec (not a refusal)
	execStart  = "start"  // starting a job
	execStop   = "stop"   // stopping a job
	execRemove = "remove" // removing a job that exited
	execAdopt  = "adopt"  // adopting a job after a restart
	execPull   = "pull"   // pulling an image for a renter (not a refusal)
	execLoad   = "load"   // loading an image a renter sent (not a refusal)
)

var endedStates = []string{records.Completed, records.Preempted, records.Failed, records.Cancelled}

func newMetrics(n *Node) *metrics {
	cur := n.cfg.Provider.Currency
	m := &metrics{
		reg: prometheus.NewRegistry(),
		gossipReceived: counterVec("idlegrid_gossip_messages_received_total",
			"Gossip messages accepted and delivered, by topic kind.", "topic", p2p.TopicKinds...),
		leasesEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idlegrid_leases_ended_total",
			Help: "Leases ended, by this node's role and the state they ended in.",
		}, []string{"role", "state"}),
		leaseSeconds: counterVec("idlegrid_lease_metered_seconds_total",
			"Seconds metered on the receipts of ended leases, by this node's role.", "role", records.Provider, records.Renter),
		earned: counterVec("idlegrid_earnings_total",
			"Amounts settled on the receipts of leases this node provided, in units of their currency.", "currency", cur),
		spent: counterVec("idlegrid_spending_total",
			"Amounts settled on the receipts of leases this node rented, in units of their currency.", "currency", cur),
		offersPublished: counterVec("idlegrid_offers_published_total",
			"Offers this provider signed and gossiped, re-publications included, and their withdrawals.", "kind", publishedOffer, publishedWithdrawal),
		quotesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idlegrid_quotes_sent_total",
			Help: "Quotes this provider sent to bidders, one for each bid its offer fits.",
		}),
		bidsUnquoted: counterVec("idlegrid_bids_unquoted_total",
			"Others' bids this provider did not quote, by why.", "reason", unquotedQueueFull, unquotedNoFit, unquotedUnsigned, unquotedUndelivered),
		attestServed: counterVec("idlegrid_attestations_served_total",
			"Attestation challenges this provider answered, by whether it could make the document.", "result", servedOK, servedFailed),
		executorErrors: counterVec("idlegrid_executor_errors_total",
			"Failures of this provider's executor (the container engine), by operation; refusals under the provider's rules are not errors.", "op",
			execCheck, execStart, execStop, execRemove, execAdopt, execPull, execLoad),
		challenges: counterVec("idlegrid_attestation_challenges_total",
			"Attestation challenges this node made of providers, by outcome.", "result", challengeVerified, challengeFailed, challengeUncovered, challengeUnanswered),
	}
	for _, role := range []string{records.Provider, records.Renter} {
		for _, s := range endedStates {
			m.leasesEnded.WithLabelValues(role, s)
		}
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
	m.reg.MustRegister(m.gossipReceived, m.leasesEnded, m.leaseSeconds, m.earned, m.spent, m.offersPublished, m.quotesSent, m.bidsUnquoted,
		m.attestServed, m.executorErrors, m.challenges, info, newReputationCollector(n), newValidatorCollector(n), newLeaseCollector(n))
	m.reg.MustRegister(nodeGauges(n)...)
	return m
}

// counterVec is a counter with one label, each of whose values (but an
// empty one) starts at zero.
func counterVec(name, help, label string, values ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	for _, v := range values {
		if v != "" {
			c.WithLabelValues(v)
		}
	}
	return c
}

// leaseEnded counts a lease's end, by side and state, its metered
// seconds, and the amount it settled: earned by a provider, spent by a
// renter.
func (m *metrics) leaseEnded(rec *records.Lease, rc *pb.Receipt) {
	if m == nil {
		return
	}
	m.leasesEnded.WithLabelValues(rec.Role, rec.State).Inc()
	m.leaseSeconds.WithLabelValues(rec.Role).Add(float64(rc.MeteredSeconds))
	amount := float64(rc.AmountMicros) / 1e6
	if rec.Role == records.Provider {
		m.earned.WithLabelValues(rc.Currency).Add(amount)
	} else {
		m.spent.WithLabelValues(rc.Currency).Add(amount)
	}
}

// received counts a gossip message delivered on a topic kind.
func (m *metrics) received(kind string) {
	if m != nil {
		m.gossipReceived.WithLabelValues(kind).Inc()
	}
}

// offerPublished counts an offer the provider gossiped, or its withdrawal.
func (m *metrics) offerPublished(withdrawn bool) {
	if m != nil {
		m.offersPublished.WithLabelValues(pick(withdrawn, publishedWithdrawal, publishedOffer)).Inc()
	}
}

// quoteSent counts a quote the provider sent a bidder.
func (m *metrics) quoteSent() {
	if m != nil {
		m.quotesSent.Inc()
	}
}

// bidUnquoted counts a bid the provider did not quote, for why (an
// unquoted… reason).
func (m *metrics) bidUnquoted(why string) {
	if m != nil {
		m.bidsUnquoted.WithLabelValues(why).Inc()
	}
}

// attestationServed counts a challenge the provider answered, and
// whether it made the document (err nil).
func (m *metrics) attestationServed(err error) {
	if m != nil {
		m.attestServed.WithLabelValues(pick(err == nil, servedOK, servedFailed)).Inc()
	}
}

// challenged counts a challenge this node made, by its outcome (a
// challenge… result).
func (m *metrics) challenged(result string) {
	if m != nil {
		m.challenges.WithLabelValues(result).Inc()
	}
}

// executorFailed counts a failure of the executor at op (an exec… op).
func (m *metrics) executorFailed(op string) {
	if m != nil {
		m.executorErrors.WithLabelValues(op).Inc()
	}
}

// pick is a if cond holds, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}
