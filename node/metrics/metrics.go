// Package metrics is a node's Prometheus registry and the counters of
// what happens in it (offers published, quotes, attestations, leases
// ended, executor failures), with every label value from a fixed set or
// the node's own configuration, never from a peer. What the node holds
// is read at each scrape by collectors the node gives New.
//
// It may import market's wire types, node/records and p2p (its topic
// kinds); no room of node's.
package metrics

import (
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the node's own Prometheus registry: libp2p's collectors
// register into it through the host, and idlegrid's own are below. What
// happens counts as it happens, through the methods below, which are
// safe on a nil *Metrics (a part built without one counts nothing); what
// the node holds is read at each scrape (the collectors New is given,
// node's metrics_collect.go).
//
// Every label takes its values from a fixed set named here, or from this
// node's own configuration (a currency is that of this node's offer or
// bid), never from what a peer sends; the fixed ones start at zero, so a
// series exists before its first event and rate() sees the first one.
type Metrics struct {
	Reg            *prometheus.Registry
	GossipReceived *prometheus.CounterVec
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
	QuotesSent      prometheus.Counter
	BidsUnquoted    *prometheus.CounterVec
	attestServed    *prometheus.CounterVec
	executorErrors  *prometheus.CounterVec
	// challenges counts the attestation challenges this node made of
	// providers, by outcome.
	challenges *prometheus.CounterVec
	// Vouchers counts the vouchers this provider's leases' renters sent,
	// by whether it took them.
	Vouchers *prometheus.CounterVec
}

// Label values of the node's own metrics.
const (
	// offers_published kind
	publishedOffer      = "offer"
	publishedWithdrawal = "withdrawal"
	// bids_unquoted reason
	UnquotedQueueFull   = "queue_full"  // the bid's lane (its relay's own or relayed bids) was full
	UnquotedNoFit       = "no_fit"      // the provider's offer does not fit the bid
	UnquotedUnsigned    = "unsigned"    // the quote could not be signed
	UnquotedUndelivered = "undelivered" // the bidder was not reached
	// attestations_served result
	servedOK     = "ok"
	servedFailed = "failed"
	// attestation_challenges result
	ChallengeVerified   = "verified"   // a fresh document covering the offer
	ChallengeFailed     = "failed"     // a document that does not verify
	ChallengeUncovered  = "uncovered"  // verified, but the offer claims more
	ChallengeUnanswered = "unanswered" // no answer came
	// executor_errors op
	ExecCheck  = "check"  // checking a proposed lease's spec (not a refusal)
	ExecStart  = "start"  // starting a job
	ExecStop   = "stop"   // stopping a job
	ExecRemove = "remove" // removing a job that exited
	ExecAdopt  = "adopt"  // adopting a job after a restart
	ExecPull   = "pull"   // pulling an image for a renter (not a refusal)
	ExecLoad   = "load"   // loading an image a renter sent (not a refusal)
	// vouchers result
	VoucherTaken   = "taken"   // checked and kept: it pays a later beat
	VoucherRefused = "refused" // forged, for other terms, or claiming what was not sent
)

var endedStates = []string{records.Completed, records.Preempted, records.Failed, records.Cancelled}

// Info is what a node's metrics say of it: idlegrid_info's labels,
// the currency its earnings and spending count in, and whether the Go
// runtime's and the process's collectors join.
type Info struct {
	Version, Swarm, Mode, Currency string
	Process                        bool
}

// New returns the node's registry with its own metrics and
// collectors, which read what the node holds at each scrape.
func New(info Info, readers ...prometheus.Collector) *Metrics {
	cur := info.Currency
	m := &Metrics{
		Reg: prometheus.NewRegistry(),
		GossipReceived: counterVec("idlegrid_gossip_messages_received_total",
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
		QuotesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idlegrid_quotes_sent_total",
			Help: "Quotes this provider sent to bidders, one for each bid its offer fits.",
		}),
		BidsUnquoted: counterVec("idlegrid_bids_unquoted_total",
			"Others' bids this provider did not quote, by why.", "reason", UnquotedQueueFull, UnquotedNoFit, UnquotedUnsigned, UnquotedUndelivered),
		attestServed: counterVec("idlegrid_attestations_served_total",
			"Attestation challenges this provider answered, by whether it could make the document.", "result", servedOK, servedFailed),
		executorErrors: counterVec("idlegrid_executor_errors_total",
			"Failures of this provider's executor (the container engine), by operation; refusals under the provider's rules are not errors.", "op",
			ExecCheck, ExecStart, ExecStop, ExecRemove, ExecAdopt, ExecPull, ExecLoad),
		Vouchers: counterVec("idlegrid_vouchers_total",
			"Vouchers the renters of this provider's channel-paid leases sent, by whether it took them.", "result", VoucherTaken, VoucherRefused),
		challenges: counterVec("idlegrid_attestation_challenges_total",
			"Attestation challenges this node made of providers, by outcome.", "result", ChallengeVerified, ChallengeFailed, ChallengeUncovered, ChallengeUnanswered),
	}
	for _, role := range []string{records.Provider, records.Renter} {
		for _, s := range endedStates {
			m.leasesEnded.WithLabelValues(role, s)
		}
	}
	if info.Process {
		m.Reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	infoGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "idlegrid_info",
		Help:        "Always 1; the labels say which node this is.",
		ConstLabels: prometheus.Labels{"version": info.Version, "swarm": info.Swarm, "mode": info.Mode},
	})
	infoGauge.Set(1)
	m.Reg.MustRegister(m.GossipReceived, m.leasesEnded, m.leaseSeconds, m.earned, m.spent, m.offersPublished, m.QuotesSent, m.BidsUnquoted,
		m.attestServed, m.executorErrors, m.challenges, m.Vouchers, infoGauge)
	m.Reg.MustRegister(readers...)
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

// LeaseEnded counts a lease's end, by side and state, its metered
// seconds, and the amount it settled: earned by a provider, spent by a
// renter.
func (m *Metrics) LeaseEnded(rec *records.Lease, rc *pb.Receipt) {
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

// Received counts a gossip message delivered on a topic kind.
func (m *Metrics) Received(kind string) {
	if m != nil {
		m.GossipReceived.WithLabelValues(kind).Inc()
	}
}

// OfferPublished counts an offer the provider gossiped, or its withdrawal.
func (m *Metrics) OfferPublished(withdrawn bool) {
	if m != nil {
		m.offersPublished.WithLabelValues(pick(withdrawn, publishedWithdrawal, publishedOffer)).Inc()
	}
}

// QuoteSent counts a quote the provider sent a bidder.
func (m *Metrics) QuoteSent() {
	if m != nil {
		m.QuotesSent.Inc()
	}
}

// BidUnquoted counts a bid the provider did not quote, for why (an
// unquoted… reason).
func (m *Metrics) BidUnquoted(why string) {
	if m != nil {
		m.BidsUnquoted.WithLabelValues(why).Inc()
	}
}

// AttestationServed counts a challenge the provider answered, and
// whether it made the document (err nil).
func (m *Metrics) AttestationServed(err error) {
	if m != nil {
		m.attestServed.WithLabelValues(pick(err == nil, servedOK, servedFailed)).Inc()
	}
}

// Challenged counts a challenge this node made, by its outcome (a
// challenge… result).
func (m *Metrics) Challenged(result string) {
	if m != nil {
		m.challenges.WithLabelValues(result).Inc()
	}
}

// Voucher counts a voucher a renter sent, by result (a Voucher… value).
func (m *Metrics) Voucher(result string) {
	if m != nil {
		m.Vouchers.WithLabelValues(result).Inc()
	}
}

// ExecutorFailed counts a failure of the executor at op (an exec… op).
func (m *Metrics) ExecutorFailed(op string) {
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
