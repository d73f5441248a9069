package reputation

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Issue 28's attestation farming: each passed challenge counted as a
// quarter receipt from this node, and declining the lease after it cost
// nothing, so a provider that never served a lease rose to 0.68 after
// one challenge and 0.89 after twelve, ranking first. In a world of 200
// peers (160 renters, 40 providers, 2,000 receipts), twelve challenges
// passed at once or one a day for twelve days, and no lease, leave a
// farmer at the prior, below an honest provider with 3 completed leases
// through renters this node trusts; and for a provider that has served,
// twelve in one day count as one.
func TestPassedChallengesAreEvidenceOfHardwareNotOfService(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 28))
		in := Inputs{Self: "me", Seeds: []peer.ID{"h10", "h11"}, Receipts: world(r, 160, 40, 2000)}
		// This node (a renter of the world) and the two it trusts most.
		trusted := append([]peer.ID{"me"}, mostTrusted(Compute(in, now, cfg), 2, cfg.TrustedAt)...)
		for _, ren := range trusted {
			in.Receipts = append(in.Receipts, good(string(ren), "honest", 1, time.Hour))
		}
		in.Receipts = append(in.Receipts, good(string(trusted[0]), "served", 1, time.Hour))
		for i := range 12 {
			in.Observations = append(in.Observations,
				Observation{Peer: "burst", Good: true, Weight: WeightAttested, At: now.Add(-time.Duration(i) * time.Minute)},
				Observation{Peer: "daily", Good: true, Weight: WeightAttested, At: now.Add(-time.Duration(i) * 24 * time.Hour)},
				Observation{Peer: "served", Good: true, Weight: WeightAttested, At: now.Add(-time.Duration(i) * time.Minute)})
		}
		s := Compute(in, now, cfg)
		honest := s.Reliability("honest")
		if sc := s.Of("honest"); sc.Trusted != 3 {
			t.Fatalf("seed %d: the honest provider's receipts through trusted renters: %+v", seed, sc)
		}
		for _, farmer := range []peer.ID{"burst", "daily"} {
			if got := s.Reliability(farmer); got > cfg.Prior || got >= honest {
				t.Errorf("seed %d: %s, twelve challenges and no lease, at %.4f; want at most the prior %.2f and below the honest provider's %.4f", seed, string(farmer), got, cfg.Prior, honest)
			}
		}
		once := in
		once.Observations = []Observation{{Peer: "served", Good: true, Weight: WeightAttested, At: now}}
		if twelve, one := s.Reliability("served"), Compute(once, now, cfg).Reliability("served"); twelve != one || one <= Compute(Inputs{Self: in.Self, Seeds: in.Seeds, Receipts: in.Receipts}, now, cfg).Reliability("served") {
			t.Errorf("seed %d: a provider that served, twelve challenges in a day at %.4f, one at %.4f; want equal, and above none", seed, twelve, one)
		}
		if seed == 0 {
			t.Logf("honest (3 trusted leases) %.4f; burst %.4f, daily %.4f (prior %.2f); served once: %.4f with its challenges", honest, s.Reliability("burst"), s.Reliability("daily"), cfg.Prior, s.Reliability("served"))
		}
	}
}

// mostTrusted are the n renters ("h…") s trusts most, each trusted
// above least (fewer if fewer are).
func mostTrusted(s *Scores, n int, least float64) []peer.ID {
	var out []peer.ID
	s.Each(func(p peer.ID, sc Score) {
		if strings.HasPrefix(string(p), "h") && sc.Trust > least {
			out = append(out, p)
		}
	})
	slices.SortFunc(out, func(a, b peer.ID) int {
		if c := cmp.Compare(s.Of(b).Trust, s.Of(a).Trust); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out[:min(n, len(out))]
}

// Issue 28's one bridge: with one lease between this node and an
// attacker, keys this node never dealt with ranked first, their trust
// flowing through that single edge; and an attacker who rented 3 GPU-
// hours from a light renter's only provider ranked eighth. Connectivity
// decay now discounts what crossed one bridge. In a 200-peer world, seen
// by a heavy renter (a fifth of the receipts are its own) and by a light
// one (two leases), with a Sybil region of 10 or 1,000 keys behind one
// lease of this node at s0 or one rental of s0 at this node's provider,
// no Sybil key but s0 rises above the prior, nor to an honest provider
// with 5 receipts from the 5 renters this node trusts most, which does.
func TestTrustThatCrossedOneBridgeIsDecayed(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 5))
		heavy := world(r, 160, 40, 2000)
		var light []Receipt
		for _, x := range heavy {
			if x.Renter != "me" {
				light = append(light, x)
			}
		}
		light = append(light, good("me", "p1", 2, time.Hour), good("me", "p2", 2, 2*time.Hour))
		for _, view := range []struct {
			name  string
			recs  []Receipt
			seeds []peer.ID
		}{{"heavy", heavy, nil}, {"light", light, nil}, {"light, seeded", light, []peer.ID{"h10", "h11"}}} {
			trusted := mostTrusted(Compute(Inputs{Self: "me", Seeds: view.seeds, Receipts: view.recs}, now, cfg), 5, 0)
			for _, edge := range []Receipt{good("me", "s0", 3, time.Hour), good("s0", "p1", 3, time.Hour)} {
				for _, n := range []int{10, 1000} {
					in := Inputs{Self: "me", Seeds: view.seeds, Receipts: append(slices.Clone(view.recs), edge)}
					for range n * 10 {
						a, b := r.IntN(n), r.IntN(n)
						if a == b {
							b = (b + 1) % n
						}
						in.Receipts = append(in.Receipts, good(fmt.Sprint("s", a), fmt.Sprint("s", b), 8, 0))
					}
					for i := range 5 {
						in.Receipts = append(in.Receipts, good(string(trusted[i]), "newcomer", 1, time.Duration(i)*time.Hour))
					}
					s := Compute(in, now, cfg)
					honest := s.Reliability("newcomer")
					above, best := 0, 0.0
					s.Each(func(p peer.ID, sc Score) {
						if isSybil(p) && p != "s0" {
							best = max(best, sc.Reliability)
							if sc.Reliability >= honest || sc.Reliability > cfg.Prior {
								above++
							}
						}
					})
					if above > 0 || honest <= cfg.Prior {
						t.Errorf("seed %d, %s renter, edge %s→%s, %d keys: %d Sybil keys above the prior or at or above the honest provider's %.4f (best %.4f)",
							seed, view.name, string(edge.Renter), string(edge.Provider), n, above, honest, best)
					}
					if seed == 0 {
						t.Logf("%s renter, edge %s→%s, %d keys: honest provider %.4f, best Sybil key %.4f, s0 %.4f (bridge of s1: %q)",
							view.name, string(edge.Renter), string(edge.Provider), n, honest, best, s.Reliability("s0"), string(s.Of("s1").Bridge))
					}
				}
			}
		}
	}
}

// Issue 28's Sybil region, on a world of 200 peers (160 renters, 40
// providers, 2,000 receipts): a region of 10 or 1,000 keys with 10,000
// receipts among themselves, joined by 1, 5 or 20 attack edges (honest
// renters who each leased once from a Sybil provider). Its share of
// trust stays within what crosses its attack edges, grows with the edges
// and not with the keys (1,000 keys hold at most 1.6 times what 10 do),
// and no Sybil key that served no honest renter outranks an honest
// newcomer with 5 receipts from the renters this node trusts most.
func TestASybilRegionGainsWithAttackEdgesNotKeys(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(3) {
		r := rand.New(rand.NewPCG(seed, 200))
		honest := world(r, 160, 40, 2000)
		trusted := mostTrusted(Compute(Inputs{Self: "me", Receipts: honest}, now, cfg), 5, 0)
		for _, k := range []int{1, 5, 20} {
			var attack []string
			for i := range k {
				attack = append(attack, fmt.Sprint("h", 100+i))
			}
			var shares []float64
			for _, n := range []int{10, 1000} {
				in := Inputs{Self: "me", Receipts: append(slices.Clone(honest), sybils(r, n, 10_000, attack)...)}
				for _, ren := range trusted {
					in.Receipts = append(in.Receipts, good(string(ren), "newcomer", 1, time.Hour))
				}
				s := Compute(in, now, cfg)
				share := s.Share(isSybil)
				shares = append(shares, share)
				bound := sybilBound(s, cfg, attack)
				if share > bound*1.000001 {
					t.Errorf("seed %d, %d edges, %d keys: share %.5f above the bound %.5f", seed, k, n, share, bound)
				}
				newcomer, best := s.Reliability("newcomer"), 0.0
				s.Each(func(p peer.ID, sc Score) {
					i := -1
					if isSybil(p) {
						fmt.Sscanf(string(p), "s%d", &i)
					}
					if i >= k { // s0 … s(k−1) served an honest renter each: the attack edges
						best = max(best, sc.Reliability)
					}
				})
				if best >= newcomer {
					t.Errorf("seed %d, %d edges, %d keys: a Sybil key that served no honest renter at %.4f, the honest newcomer at %.4f", seed, k, n, best, newcomer)
				}
				if seed == 0 {
					t.Logf("%d edges, %d keys: share %.5f (bound %.5f), best Sybil key %.4f, newcomer %.4f", k, n, share, bound, best, newcomer)
				}
			}
			if shares[1] > shares[0]*1.6+1e-4 {
				t.Errorf("seed %d, %d edges: the share grew from %.5f (10 keys) to %.5f (1,000 keys)", seed, k, shares[0], shares[1])
			}
		}
	}
}

// Whitewashing: a provider that failed its renters starts over under a
// new key. On a 200-peer world, the new key is never above an honest
// newcomer with no history (the prior): bare, with 20 receipts from ten
// renter keys of its own, or with 3 from its old key, whose vote for the
// key it is the only bridge to counts for nothing.
func TestAWhitewashedKeyIsNeverAboveAnHonestNewcomer(t *testing.T) {
	cfg := DefaultConfig()
	r := rand.New(rand.NewPCG(1, 28))
	base := world(r, 160, 40, 2000)
	// The old key failed 7 of 12 leases with renters of the world.
	for i := range 12 {
		k := Good
		if i < 7 {
			k = ProviderFault
		}
		base = append(base, Receipt{Renter: id(fmt.Sprint("h", i)), Provider: "old", Kind: k, Hours: 1, At: now.Add(-time.Duration(i) * time.Hour), CoSigned: true})
	}
	own := slices.Clone(base)
	for i := range 20 {
		own = append(own, good(fmt.Sprint("fake", i%10), "new", 4, time.Duration(i)*time.Minute))
	}
	fromOld := slices.Clone(base)
	for i := range 3 {
		fromOld = append(fromOld, good("old", "new", 4, time.Duration(i)*time.Hour))
	}
	for name, recs := range map[string][]Receipt{"bare": base, "its own renters": own, "its old key": fromOld} {
		s := Compute(Inputs{Self: "me", Receipts: recs}, now, cfg)
		if old := s.Reliability("old"); old >= cfg.Prior {
			t.Fatalf("%s: the old key at %.4f, want below the prior", name, old)
		}
		if got, newcomer := s.Reliability("new"), s.Reliability("newcomer"); got > newcomer {
			t.Errorf("%s: the new key at %.4f, above an honest newcomer at %.4f (%+v)", name, got, newcomer, s.Of("new"))
		}
	}
}

// Slander: Sybil keys cannot lower an honest provider below the prior.
// On a 200-peer world with a region of 1,000 Sybil keys joined by 5
// attack edges, each key hands over a failure receipt against an honest
// provider and against a newcomer, signed by itself alone (a provider
// never co-signs a failure it did not cause), and the region's keys
// co-sign disputes of none: the honest provider keeps its standing and
// the newcomer its prior.
func TestSybilsCannotSlanderAnHonestProvider(t *testing.T) {
	cfg := DefaultConfig()
	r := rand.New(rand.NewPCG(2, 28))
	honest := world(r, 160, 40, 2000)
	recs := append(slices.Clone(honest), sybils(r, 1000, 10_000, []string{"h1", "h2", "h3", "h4", "h5"})...)
	before := Compute(Inputs{Self: "me", Receipts: recs}, now, cfg)
	for i := range 1000 {
		for _, victim := range []string{"p5", "newcomer"} {
			recs = append(recs, Receipt{Renter: id(fmt.Sprint("s", i)), Provider: id(victim), Kind: ProviderFault, Hours: 1, At: now, CoSigned: false})
		}
	}
	after := Compute(Inputs{Self: "me", Receipts: recs}, now, cfg)
	if b, a := before.Reliability("p5"), after.Reliability("p5"); a < b || a < cfg.Prior {
		t.Errorf("the honest provider: %.4f before the slander, %.4f after", b, a)
	}
	if got := after.Reliability("newcomer"); got < cfg.Prior {
		t.Errorf("the newcomer slandered to %.4f, below the prior", got)
	}
	// The same keys, each having leased from the honest provider once (a
	// term it co-signed), complain of it in their chains: half-signed
	// records, each counted by its complainer's trust, which the region
	// holds only through its 5 attack edges.
	chained := slices.Clone(recs[:len(recs)-2000]) // the bare claims above left out
	for i := range 1000 {
		s := id(fmt.Sprint("s", i))
		chained = append(chained, Receipt{Renter: s, Provider: "p5", Kind: ProviderFault, Hours: 1, At: now, Proposer: s})
	}
	b, a := before.Reliability("p5"), Compute(Inputs{Self: "me", Receipts: chained}, now, cfg).Reliability("p5")
	if a < cfg.Prior {
		t.Errorf("the honest provider: %.4f before, %.4f after 1,000 Sybil keys' chained complaints; want at least the prior", b, a)
	}
	t.Logf("the honest provider: %.4f before, %.4f after 1,000 Sybil keys' chained complaints", b, a)
}

// Hidden failures: a provider that failed 7 of 12 leases and signed none
// of the failures scored 0.606–0.612 on the receipts it co-signed, above
// every honest newcomer (0.600). The renters who suffered the failures
// hold them in their chains, half-signed over terms the provider signed;
// read from those chains, they leave the provider below the newcomer, and
// below where it stands with its failures co-signed no lower than that.
func TestHiddenFailuresAreSeenFromTheRentersWhoSufferedThem(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 2028))
		base := world(r, 160, 40, 2000)
		hidden, chained := slices.Clone(base), slices.Clone(base)
		for i := range 12 {
			ren := id(fmt.Sprint("h", i))
			if i < 7 {
				chained = append(chained, Receipt{Renter: ren, Provider: "hider", Kind: ProviderFault, Hours: 0.2, At: now.Add(-time.Duration(i) * time.Hour), Proposer: ren})
				continue
			}
			rc := good(string(ren), "hider", 1, time.Duration(i)*time.Hour)
			hidden, chained = append(hidden, rc), append(chained, rc)
		}
		before, after := Compute(Inputs{Self: "me", Receipts: hidden}, now, cfg), Compute(Inputs{Self: "me", Receipts: chained}, now, cfg)
		if got := before.Reliability("hider"); seed == 0 {
			t.Logf("the hider: %.4f with its failures hidden, %.4f read from its renters' chains; a newcomer %.4f", got, after.Reliability("hider"), after.Reliability("newcomer"))
		}
		if got, newcomer := after.Reliability("hider"), after.Reliability("newcomer"); got >= newcomer || got >= cfg.Prior {
			t.Errorf("seed %d: the hider at %.4f with its renters' chains read; want below a newcomer's %.4f", seed, got, newcomer)
		}
		if sc := after.Of("hider"); sc.Failures != 7 {
			t.Errorf("seed %d: the hider's failures read: %+v", seed, sc)
		}
	}
}
