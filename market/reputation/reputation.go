// Package reputation ranks peers from what one node can verify: the
// receipts of leases (its own, and others' co-signed ones), its own
// attestation and dial results, and disputes over GPU UUIDs. It is pure:
// no network, no clock, no storage; Compute takes the inputs and now.
//
// A swarm has no gatekeeper and keys cost nothing, so a score is
// personalised and bounded against Sybils rather than global. Trust flows
// from this node and the seeds it chooses through the graph of co-signed
// receipts, as a random walk with restart (personalised PageRank, the
// shape of Tribler's and MeritRank's trust): at each hop the walk goes on
// with probability Continue, to a counterparty in proportion to the value
// of their receipts (capped per pair), or returns to the seeds. Trust
// therefore decays per hop, receipts decay with age, and whatever trust a
// region of Sybil keys holds entered it through the receipts it has with
// honest peers (its attack edges): it is bounded by their value and by
// 1/(1−Continue), however many keys and receipts the region has among
// itself.
//
// A provider's reliability is a weighted vote of the receipts it earned,
// each counted by the trust of the renter that co-signed it (and at most
// PairCap per renter), against a prior: an unknown provider gets Prior,
// one with good receipts from trusted renters more, one with failures
// less. A disputed GPU UUID shrinks what a provider earned above the
// prior, by a bounded amount that decays, and never takes it below the
// prior: a griefer who copies an honest provider's UUIDs cannot push it
// below a provider with no history.
package reputation

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Kind is what a receipt says of its parties.
type Kind int

const (
	// Good: the lease ran its term, or the workload ended it, or a bronze
	// lease was preempted with notice: the provider kept its word.
	Good Kind = iota
	// Neutral: cancelled; an interaction, good for neither party's score.
	Neutral
	// ProviderFault: the lease failed on the provider's side (it did not
	// start the job, shut down, or vanished).
	ProviderFault
	// RenterFault: the renter left a receipt its provider signed without
	// its countersignature.
	RenterFault
)

// KindOf classifies a receipt's outcome.
func KindOf(o pb.Outcome) Kind {
	switch o {
	case pb.Outcome_OUTCOME_COMPLETED, pb.Outcome_OUTCOME_PREEMPTED:
		return Good
	case pb.Outcome_OUTCOME_FAILED:
		return ProviderFault
	}
	return Neutral
}

// Receipt is one lease as a verified receipt tells it.
type Receipt struct {
	Renter, Provider peer.ID
	Kind             Kind
	Hours            float64 // metered, from verified telemetry
	At               time.Time
	// CoSigned is true for a receipt both parties signed; a node's own
	// record of a lease signed by one side (the provider vanished, the
	// renter never countersigned) counts only when this node is that side.
	CoSigned bool
	// Proposer is, for another's record that one side signed alone in
	// its chain over the lease's term both signed (a half-signed record:
	// the other never completed it), that side. It counts as that side's
	// complaint, and only so: a renter's of a ProviderFault, a provider's
	// of a RenterFault, weighed by the trust in the one complaining, as a
	// co-signed receipt's vote is; it makes no edge of the trust graph.
	// A provider cannot hide a lease it failed from those who ask the
	// renter, and a key cannot complain of a lease that never was.
	Proposer peer.ID
}

// Observation is what this node saw of a peer outside any receipt: an
// attestation that passed or failed, a peer that could not be reached.
type Observation struct {
	Peer   peer.ID
	Good   bool
	Weight float64 // in receipts: 1 counts as much as one receipt
	At     time.Time
	What   string
}

// Weights of what a node sees of a peer outside any receipt (an
// Observation's Weight), in receipts: a failed attestation counts as a
// failed lease; a peer that could not be reached or attested during a
// rental, or that passed an attestation, as a quarter of one. A good
// observation is a passed attestation, and counts as Config.AttestWindow
// says.
const (
	WeightAttestFailed = 1
	WeightMistimed     = 1 // a telemetry beat stamped out of its lease's term
	WeightUnreachable  = 0.25
	WeightAttested     = 0.25
)

// Dispute is a GPU UUID two peers claimed within the conflict window,
// which no CC certificate settled.
type Dispute struct {
	A, B peer.ID
	At   time.Time
}

// Inputs is everything a node ranks from.
type Inputs struct {
	Self         peer.ID
	Seeds        []peer.ID // peers whose view this node adopts; may be empty
	Receipts     []Receipt
	Observations []Observation
	Disputes     []Dispute
}

// Config tunes Compute. The zero value of a field means its default.
type Config struct {
	// Continue is the chance a trust walk takes one more hop (0.6): the
	// decay per hop, and what bounds a Sybil region at 1/(1−Continue)
	// times what flows in over its attack edges.
	Continue float64
	// SelfShare is the share of restarts that return to this node rather
	// than to its seeds (0.5; all of them with no seeds).
	SelfShare float64
	// HalfLife halves a receipt's and an observation's weight (30 days).
	HalfLife time.Duration
	// Prior is the reliability of a provider with no history (0.6), and
	// PriorWeight how many receipts' worth it counts for (1).
	Prior, PriorWeight float64
	// PairCap bounds what one counterparty's receipts add to a peer's
	// score and to the edge between them (3 receipts' worth).
	PairCap float64
	// DisputeShrink is how much of a provider's earned surplus one fresh
	// dispute takes (0.25), MaxShrink the most all its disputes take
	// (0.5), and DisputeHalfLife how fast one fades (1 day).
	DisputeShrink, MaxShrink float64
	DisputeHalfLife          time.Duration
	// TrustedAt is the trust from which a counterparty counts as trusted
	// in a score's explanation (0.05).
	TrustedAt float64
	// Iterations bounds the power iteration (50); it stops earlier once
	// the trust vector moves less than 1e-9.
	Iterations int
	// AttestWindow is how often a passed challenge counts for a provider
	// (once a day): within one window, however many it passed count as
	// one. All of them together count for at most AttestCap receipts'
	// worth (1), and only for a provider that has served a lease a
	// trusted renter co-signed: a passed challenge is evidence of
	// hardware, not of service.
	AttestWindow time.Duration
	AttestCap    float64
	// BridgeDecay is what connectivity decay takes (all of it: 1) of a
	// peer's trust and of its reliability above the prior when all the
	// trust that reaches it crossed one other peer (see graph.bridges):
	// one peer's word is not a reputation. A region of keys behind a
	// single lease with this node then neither votes nor rises above a
	// provider with no history.
	BridgeDecay float64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Continue: 0.6, SelfShare: 0.5, HalfLife: 30 * 24 * time.Hour,
		Prior: 0.6, PriorWeight: 1, PairCap: 3,
		DisputeShrink: 0.25, MaxShrink: 0.5, DisputeHalfLife: 24 * time.Hour,
		TrustedAt: 0.05, Iterations: 50,
		AttestWindow: 24 * time.Hour, AttestCap: 1, BridgeDecay: 1,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ v, def *float64 }{
		{&c.Continue, &d.Continue}, {&c.SelfShare, &d.SelfShare}, {&c.Prior, &d.Prior},
		{&c.PriorWeight, &d.PriorWeight}, {&c.PairCap, &d.PairCap}, {&c.DisputeShrink, &d.DisputeShrink},
		{&c.MaxShrink, &d.MaxShrink}, {&c.TrustedAt, &d.TrustedAt}, {&c.AttestCap, &d.AttestCap},
		{&c.BridgeDecay, &d.BridgeDecay},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.HalfLife <= 0 {
		c.HalfLife = d.HalfLife
	}
	if c.DisputeHalfLife <= 0 {
		c.DisputeHalfLife = d.DisputeHalfLife
	}
	if c.AttestWindow <= 0 {
		c.AttestWindow = d.AttestWindow
	}
	if c.Iterations <= 0 {
		c.Iterations = d.Iterations
	}
	c.Continue = min(c.Continue, 0.95)
	c.BridgeDecay = min(c.BridgeDecay, 1)
	return c
}

// Score is one peer's standing in this node's view, with its basis.
type Score struct {
	// Reliability as a provider, in [0, 1]: what the matcher weighs.
	Reliability float64
	// AsRenter is the same vote over the receipts where it rented.
	AsRenter float64
	// Trust is how much this node trusts the peer as a counterparty, in
	// [0, 1]: its personalised trust relative to this node's own.
	Trust float64
	// Receipts counts the receipts that name the peer as provider with a
	// good outcome; Trusted those of them co-signed by a trusted renter.
	Receipts, Trusted int
	// Failures counts its failed leases and failed observations.
	Failures int
	// Disputes counts the UUID disputes it is party to.
	Disputes int
	// Bridge is the one peer all the trust that reaches it crossed, when
	// there is one: its Trust is then decayed by Config.BridgeDecay.
	Bridge peer.ID
	// Good and Bad are the weighted votes behind Reliability.
	Good, Bad float64
}

// Scores is the outcome of Compute: immutable, safe for concurrent use.
type Scores struct {
	self   peer.ID
	prior  float64
	ids    []peer.ID
	index  map[peer.ID]int
	mass   []float64 // personalised trust: the walk's stationary share, summing to 1
	trust  []float64 // mass relative to this node's own, at most 1, after connectivity decay
	bridge []int32   // see graph.bridges
	by     map[peer.ID]*Score
	g      graph
}

// Of returns p's score; an unknown peer has the prior and no trust.
func (s *Scores) Of(p peer.ID) Score {
	if sc, ok := s.by[p]; ok {
		return *sc
	}
	return Score{Reliability: s.prior, AsRenter: s.prior}
}

// Reliability is p's reliability as a provider: the matcher's source.
func (s *Scores) Reliability(p peer.ID) float64 { return s.Of(p).Reliability }

// Share is the share of all trust held by the peers in: what a region
// of the graph gained.
func (s *Scores) Share(in func(peer.ID) bool) float64 {
	sum := 0.0
	for i, p := range s.ids {
		if in(p) {
			sum += s.mass[i]
		}
	}
	return sum
}

// Len is how many peers the scores know.
func (s *Scores) Len() int { return len(s.by) }

// Each calls f with every peer the scores know and its score.
func (s *Scores) Each(f func(peer.ID, Score)) {
	for p, sc := range s.by {
		f(p, *sc)
	}
}

// Path is how trust reached p: from this node or a seed, over the
// counterparties that carried the most of it, at most 8 hops; nil when
// no trust reaches p.
func (s *Scores) Path(p peer.ID) []peer.ID {
	i, ok := s.index[p]
	if !ok || s.mass[i] == 0 {
		return nil
	}
	path := []peer.ID{p}
	seen := map[int]bool{i: true}
	for range 8 {
		if s.ids[i] == s.self {
			break
		}
		best, bestFlow := -1, 0.0
		for k := s.g.off[i]; k < s.g.off[i+1]; k++ {
			if to := int(s.g.to[k]); !seen[to] && s.mass[to]*s.g.w[k]/s.g.deg[to] > bestFlow {
				best, bestFlow = to, s.mass[to]*s.g.w[k]/s.g.deg[to]
			}
		}
		if best < 0 {
			break
		}
		i = best
		seen[i] = true
		path = append(path, s.ids[i])
	}
	slices.Reverse(path)
	return path
}

// keyed is a value under a 64-bit key; vote is one receipt's vote on the
// party in the key's high half, by the party in its low half.
type keyed struct {
	key uint64
	v   float64
}

type vote struct {
	key     uint64
	v       float64
	good    bool
	receipt bool // a receipt's, not an observation's
}

func pairKey(hi, lo int32) uint64 { return uint64(hi)<<32 | uint64(uint32(lo)) }

// bucketSort sorts xs by key, whose high half is below n: a counting
// sort on the high half, then a sort of each bucket on the low half (a
// peer's counterparties are few), linear in len(xs) where one sort of
// the whole would not be.
func bucketSort[T any](xs []T, n int, key func(T) uint64) []T {
	start := make([]int, n+1)
	for _, x := range xs {
		start[key(x)>>32+1]++
	}
	for i := range n {
		start[i+1] += start[i]
	}
	out := make([]T, len(xs))
	fill := slices.Clone(start[:n])
	for _, x := range xs {
		hi := key(x) >> 32
		out[fill[hi]] = x
		fill[hi]++
	}
	for i := range n {
		if b := out[start[i]:start[i+1]]; len(b) > 1 {
			slices.SortStableFunc(b, func(x, y T) int { return cmp.Compare(key(x), key(y)) })
		}
	}
	return out
}

// eachGroup calls f with each key of kv, sorted by key, and the sum of its
// values, in key order.
func eachGroup(kv []keyed, f func(uint64, float64)) {
	for i := 0; i < len(kv); {
		k, sum := kv[i].key, 0.0
		for ; i < len(kv) && kv[i].key == k; i++ {
			sum += kv[i].v
		}
		f(k, sum)
	}
}

// graph is the receipt graph in compressed rows: the neighbours of node i
// are to[off[i]:off[i+1]], with weights w.
type graph struct {
	off []int32
	to  []int32
	w   []float64
	deg []float64 // each node's total weight
}

func newGraph(n int, ends [][2]int32, weights []float64) graph {
	g := graph{off: make([]int32, n+1), deg: make([]float64, n)}
	for _, e := range ends {
		g.off[e[0]+1]++
		g.off[e[1]+1]++
	}
	for i := range n {
		g.off[i+1] += g.off[i]
	}
	g.to, g.w = make([]int32, g.off[n]), make([]float64, g.off[n])
	fill := slices.Clone(g.off[:n])
	for k, e := range ends { // ends are sorted, so each row is too
		for _, d := range [][2]int32{{e[0], e[1]}, {e[1], e[0]}} {
			g.to[fill[d[0]]], g.w[fill[d[0]]] = d[1], weights[k]
			fill[d[0]]++
			g.deg[d[0]] += weights[k]
		}
	}
	return g
}

// personalised runs the random walk with restart to a fixed point: x =
// (1−c)·r + c·Pᵀx, where a node with no edges returns its walk to r.
func (g graph) personalised(r []float64, cfg Config) []float64 {
	n := len(g.deg)
	x := slices.Clone(r)
	next := make([]float64, n)
	c := cfg.Continue
	for range cfg.Iterations {
		clear(next)
		dangling := 0.0
		for i := range n {
			if g.deg[i] == 0 {
				dangling += x[i]
				continue
			}
			out := c * x[i] / g.deg[i]
			for k := g.off[i]; k < g.off[i+1]; k++ {
				next[g.to[k]] += out * g.w[k]
			}
		}
		back := (1 - c) + c*dangling // the mass that restarts (x sums to 1)
		moved := 0.0
		for i := range next {
			next[i] += back * r[i]
			moved += math.Abs(next[i] - x[i])
		}
		x, next = next, x
		if moved < 1e-9 {
			break
		}
	}
	return x
}

// receiptValue is what one receipt is worth before decay. A good one:
// a quarter for having happened, and up to three quarters more for the
// hours metered, so that short and bronze leases earn too. A fault: one
// whole, however short the lease ran, since what a failure costs the
// other party does not shrink with the hours.
func receiptValue(r Receipt) float64 {
	if r.Kind == ProviderFault || r.Kind == RenterFault {
		return 1
	}
	return 0.25 + 0.75*min(1, max(r.Hours, 0))
}

// restart is the distribution a trust walk returns to: this node, and its
// seeds in equal shares.
func restart(s *Scores, in Inputs, cfg Config) []float64 {
	r := make([]float64, len(s.ids))
	var seeds []int
	for _, p := range in.Seeds {
		if i := s.index[p]; p != in.Self && !slices.Contains(seeds, i) {
			seeds = append(seeds, i)
		}
	}
	if len(seeds) == 0 {
		r[0] = 1
		return r
	}
	r[0] = cfg.SelfShare
	for _, i := range seeds {
		r[i] += (1 - cfg.SelfShare) / float64(len(seeds))
	}
	return r
}
