package reputation

import (
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Compute ranks every peer the inputs name, as of now: the usable
// receipts, the graph of co-signed pairs and the personalised trust it
// gives, the votes of receipts and observations weighed by that trust,
// and each peer's scores from them.
func Compute(in Inputs, now time.Time, cfg Config) *Scores {
	c := &computing{in: in, now: now, cfg: cfg.withDefaults()}
	c.s = &Scores{self: in.Self, prior: c.cfg.Prior, index: map[peer.ID]int{}, by: map[peer.ID]*Score{}}
	for _, p := range append([]peer.ID{in.Self}, in.Seeds...) {
		c.id(p)
	}
	recs := c.usableReceipts()
	for _, o := range in.Observations {
		c.id(o.Peer)
	}
	for _, d := range in.Disputes {
		c.id(d.A)
		c.id(d.B)
	}
	c.trustGraph(recs)
	provVotes, renVotes := c.votes(recs)
	c.score(c.tally(provVotes), c.tally(renVotes), c.attested())
	return c.s
}

// computing is one Compute's state: the scores it builds, and what it
// builds them from.
type computing struct {
	s   *Scores
	in  Inputs
	now time.Time
	cfg Config
}

// id is p's index, given on first sight.
func (c *computing) id(p peer.ID) int32 {
	s := c.s
	if i, ok := s.index[p]; ok {
		return int32(i)
	}
	s.index[p] = len(s.ids)
	s.ids = append(s.ids, p)
	return int32(len(s.ids) - 1)
}

// decay is what a thing done at at is worth now, halving every half.
func (c *computing) decay(at time.Time, half time.Duration) float64 {
	age := c.now.Sub(at)
	if age <= 0 {
		return 1
	}
	return math.Exp2(-age.Seconds() / half.Seconds())
}

// rec is a usable receipt: its parties as indexes, its decayed value.
type rec struct {
	ren, prov int32
	kind      Kind
	v         float64
	cosigned  bool
}

// usableReceipts are the receipts that count, each once. Another's
// receipt counts co-signed, or half-signed as its proposer's complaint;
// this node's own record of a lease one side signed counts for this node.
func (c *computing) usableReceipts() []rec {
	in := c.in
	recs := make([]rec, 0, len(in.Receipts))
	for _, r := range in.Receipts {
		if r.Renter == r.Provider || !(r.CoSigned || r.Renter == in.Self || r.Provider == in.Self || complaint(r)) {
			continue
		}
		recs = append(recs, rec{c.id(r.Renter), c.id(r.Provider), r.Kind, receiptValue(r) * c.decay(r.At, c.cfg.HalfLife), r.CoSigned})
	}
	return recs
}

// complaint says whether r is a half-signed record that counts: its
// proposer's complaint of the other party.
func complaint(r Receipt) bool {
	return (r.Proposer == r.Renter && r.Kind == ProviderFault) || (r.Proposer == r.Provider && r.Kind == RenterFault)
}

// trustGraph builds the graph, one undirected edge per pair of parties
// worth the value of their co-signed receipts, capped, and the trust of
// every peer in it, personalised from this node and its seeds.
func (c *computing) trustGraph(recs []rec) {
	s, cfg, n := c.s, c.cfg, len(c.s.ids)
	var pairs []keyed
	for _, r := range recs {
		if r.cosigned {
			pairs = append(pairs, keyed{pairKey(min(r.ren, r.prov), max(r.ren, r.prov)), r.v})
		}
	}
	var ends [][2]int32
	var weights []float64
	pairs = bucketSort(pairs, n, func(x keyed) uint64 { return x.key })
	eachGroup(pairs, func(k uint64, sum float64) {
		ends = append(ends, [2]int32{int32(k >> 32), int32(uint32(k))})
		weights = append(weights, min(sum, cfg.PairCap))
	})
	s.g = newGraph(n, ends, weights)
	r := restart(s, c.in, cfg)
	s.mass = s.g.personalised(r, cfg)
	var roots []int
	for i, x := range r {
		if x > 0 {
			roots = append(roots, i)
		}
	}
	s.bridge = s.g.bridges(roots)
	s.trust = make([]float64, n)
	for i, x := range s.mass {
		s.trust[i] = min(1, x/s.mass[0]) // relative to this node's own
		if s.bridge[i] >= 0 {
			s.trust[i] *= 1 - cfg.BridgeDecay
		}
	}
}

// votes are what the receipts and this node's observations say of each
// party, as a provider and as a renter.
func (c *computing) votes(recs []rec) (provVotes, renVotes []vote) {
	for _, r := range recs {
		switch r.kind {
		case Good:
			provVotes = append(provVotes, vote{pairKey(r.prov, r.ren), r.v, true, true})
			renVotes = append(renVotes, vote{pairKey(r.ren, r.prov), r.v, true, true})
		case ProviderFault:
			provVotes = append(provVotes, vote{pairKey(r.prov, r.ren), r.v, false, true})
		case RenterFault:
			renVotes = append(renVotes, vote{pairKey(r.ren, r.prov), r.v, false, true})
		}
	}
	for _, o := range c.in.Observations {
		if o.Peer != c.in.Self && !o.Good {
			provVotes = append(provVotes, vote{pairKey(c.id(o.Peer), 0), max(o.Weight, 0) * c.decay(o.At, c.cfg.HalfLife), false, false})
		}
	}
	return provVotes, renVotes
}

// attested is what each provider's passed challenges are worth: in each
// AttestWindow the best of them, decayed, and all of them together at
// most AttestCap. A key that passes a challenge and declines the lease
// costs its owner nothing, so how often it did says nothing of service.
func (c *computing) attested() map[int32]float64 {
	type slot struct {
		who    int32
		window int64
	}
	best := map[slot]float64{}
	for _, o := range c.in.Observations {
		if o.Peer == c.in.Self || !o.Good {
			continue
		}
		k := slot{c.id(o.Peer), o.At.UnixNano() / int64(c.cfg.AttestWindow)}
		best[k] = max(best[k], max(o.Weight, 0)*c.decay(o.At, c.cfg.HalfLife))
	}
	out := map[int32]float64{}
	for k, v := range best {
		out[k.who] = min(c.cfg.AttestCap, out[k.who]+v)
	}
	return out
}

// tally counts the votes: each by the trust of the party that vouches by
// it, at most PairCap per counterparty and side.
func (c *computing) tally(votes []vote) map[int32]*Score {
	s, cfg := c.s, c.cfg
	out := map[int32]*Score{}
	votes = bucketSort(votes, len(s.ids), func(x vote) uint64 { return x.key })
	for i := 0; i < len(votes); {
		k := votes[i].key
		var good, bad float64
		var receipts, ko int
		for ; i < len(votes) && votes[i].key == k; i++ {
			v := votes[i]
			switch {
			case v.good:
				good += v.v
				if v.receipt {
					receipts++
				}
			default:
				bad += v.v
				ko++
			}
		}
		who, by := int32(k>>32), int32(uint32(k))
		sc := out[who]
		if sc == nil {
			sc = &Score{}
			out[who] = sc
		}
		t := s.trust[by]
		sc.Good += t * min(good, cfg.PairCap)
		sc.Bad += t * min(bad, cfg.PairCap)
		sc.Receipts += receipts
		sc.Failures += ko
		if t >= cfg.TrustedAt {
			sc.Trusted += receipts
		}
	}
	return out
}

// score gives every peer but this node its scores from the tallies: its
// reliability as a provider, with its passed challenges when a trusted
// renter co-signed a lease it served, shrunk above the prior by the
// disputes it is in, and its score as a renter.
func (c *computing) score(asProvider, asRenter map[int32]*Score, attested map[int32]float64) {
	s, cfg, n := c.s, c.cfg, len(c.s.ids)
	shrink := make([]float64, n)
	disputes := make([]int, n)
	for _, d := range c.in.Disputes {
		for _, p := range []peer.ID{d.A, d.B} {
			i := c.id(p)
			shrink[i] += cfg.DisputeShrink * c.decay(d.At, cfg.DisputeHalfLife)
			disputes[i]++
		}
	}
	score := func(good, bad float64) float64 {
		return (cfg.Prior*cfg.PriorWeight + good) / (cfg.PriorWeight + good + bad)
	}
	for i, p := range s.ids {
		if p == c.in.Self {
			continue
		}
		sc := &Score{}
		if v := asProvider[int32(i)]; v != nil {
			*sc = *v
			sc.Trusted = min(sc.Trusted, sc.Receipts)
		}
		if sc.Trusted > 0 {
			sc.Good += attested[int32(i)] // this node's own: its trust is 1
		}
		sc.Trust, sc.Disputes = s.trust[i], disputes[i]
		if b := s.bridge[i]; b >= 0 {
			sc.Bridge = s.ids[b]
		}
		sc.Reliability = score(sc.Good, sc.Bad)
		if surplus := sc.Reliability - cfg.Prior; surplus > 0 {
			sc.Reliability -= surplus * min(shrink[i], cfg.MaxShrink)
		}
		if surplus := sc.Reliability - cfg.Prior; surplus > 0 && s.bridge[i] >= 0 {
			sc.Reliability -= surplus * cfg.BridgeDecay
		}
		sc.AsRenter = cfg.Prior
		if v := asRenter[int32(i)]; v != nil {
			sc.AsRenter = score(v.Good, v.Bad)
		}
		s.by[p] = sc
	}
}
