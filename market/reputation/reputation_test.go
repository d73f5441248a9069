package reputation

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func id(name string) peer.ID { return peer.ID(name) }

func good(renter, provider string, hours float64, ago time.Duration) Receipt {
	return Receipt{Renter: id(renter), Provider: id(provider), Kind: Good, Hours: hours, At: now.Add(-ago), CoSigned: true}
}

// An unknown provider ranks below one with good receipts and above one
// that failed; a provider's failures seen by this node count in full.
func TestPriorSitsBetweenProvenAndFailing(t *testing.T) {
	in := Inputs{Self: "me", Receipts: []Receipt{
		good("me", "proven", 2, time.Hour), good("me", "proven", 1, 2*time.Hour), good("me", "proven", 1, 3*time.Hour),
		{Renter: "me", Provider: "vanished", Kind: ProviderFault, Hours: 0.2, At: now.Add(-time.Hour)}, // our own record, unsigned by it
		good("me", "short", 0.05, time.Hour), // a short bronze lease still earns
	}}
	s := Compute(in, now, Config{})
	proven, unknown, failed, short := s.Reliability("proven"), s.Reliability("never-seen"), s.Reliability("vanished"), s.Reliability("short")
	if !(proven > short && short > unknown && unknown > failed) {
		t.Errorf("proven %.3f, short %.3f, unknown %.3f, failed %.3f: want them in that order", proven, short, unknown, failed)
	}
	if unknown != DefaultConfig().Prior {
		t.Errorf("unknown: %.3f, want the prior", unknown)
	}
	if sc := s.Of("proven"); sc.Receipts != 3 || sc.Trusted != 3 || sc.Trust <= 0 {
		t.Errorf("proven's basis: %+v", sc)
	}
	// What this node saw outside receipts counts in the vote, not as receipts.
	in.Observations = []Observation{{Peer: "proven", Good: true, Weight: 0.25, At: now}, {Peer: "proven", Good: false, Weight: 1, At: now}}
	if sc := Compute(in, now, Config{}).Of("proven"); sc.Receipts != 3 || sc.Failures != 1 || sc.Reliability >= proven {
		t.Errorf("proven, attested once and failed once: %+v", sc)
	}
}

// Only co-signed receipts of others count: a receipt one party signed is
// that party's word, and counts only for the node that wrote it.
func TestOthersUnsignedReceiptsCountForNothing(t *testing.T) {
	in := Inputs{Self: "me", Receipts: []Receipt{
		good("me", "alice", 1, time.Hour),
		{Renter: "alice", Provider: "bob", Kind: ProviderFault, Hours: 1, At: now, CoSigned: false},
	}}
	if got := Compute(in, now, Config{}).Reliability("bob"); got != DefaultConfig().Prior {
		t.Errorf("bob, accused in a receipt he never signed: %.3f, want the prior", got)
	}
}

// world is an honest region around "me": renters h0..h(n-1) and
// providers p0..p(m-1), each renter with receipts from a few providers,
// "me" among the renters.
func world(r *rand.Rand, renters, providers, receipts int) []Receipt {
	var out []Receipt
	for i := range receipts {
		ren := fmt.Sprint("h", r.IntN(renters))
		if i%5 == 0 {
			ren = "me"
		}
		out = append(out, good(ren, fmt.Sprint("p", r.IntN(providers)), 0.5+r.Float64()*4, time.Duration(r.IntN(240))*time.Hour))
	}
	return out
}

// sybils is a region of n keys with receipts receipts among themselves,
// joined to the honest region by the attack edges: honest renters who
// each leased once from a Sybil provider.
func sybils(r *rand.Rand, n, receipts int, attack []string) []Receipt {
	var out []Receipt
	for range receipts {
		a, b := r.IntN(n), r.IntN(n)
		if a == b {
			b = (b + 1) % n
		}
		out = append(out, good(fmt.Sprint("s", a), fmt.Sprint("s", b), 8, 0))
	}
	for i, h := range attack {
		out = append(out, good(h, fmt.Sprint("s", i%n), 8, 0))
	}
	return out
}

func isSybil(p peer.ID) bool { return strings.HasPrefix(string(p), "s") }

// sybilBound is the most trust a Sybil region joined by the attack edges
// (one receipt each, from the renters in attack) can hold in s: whatever
// enters it crosses an attack edge and stays at most 1/(1−c) steps on
// average, so the flow over the edges of one receipt's worth out of each
// attacker's total, times 1/(1−c).
func sybilBound(s *Scores, cfg Config, attack []string) float64 {
	bound := 0.0
	for _, h := range attack {
		i := s.index[id(h)]
		bound += cfg.Continue * s.mass[i] * min(1, cfg.PairCap) / s.g.deg[i]
	}
	return bound / (1 - cfg.Continue)
}

// The Sybil bound (issue 12): a region of Sybil keys joined to the honest
// region by k attack edges gains a share of trust bounded by those edges,
// which does not grow with its number of keys or of receipts among
// themselves; and an honest provider with 5 receipts through trusted
// renters outranks every Sybil provider. Checked over random worlds.
func TestSybilsGainABoundedShare(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 11))
		honest := world(r, 40, 15, 400)
		for _, k := range []int{1, 3} {
			var attack []string
			for i := range k {
				attack = append(attack, fmt.Sprint("h", i))
			}
			var shares []float64
			for _, n := range []int{10, 1000} {
				in := Inputs{Self: "me", Seeds: []peer.ID{"h10", "h11"}, Receipts: append(append([]Receipt{}, honest...), sybils(r, n, 10_000, attack)...)}
				// The newcomer: 5 receipts through renters "me" dealt with.
				for i := range 5 {
					in.Receipts = append(in.Receipts, good(fmt.Sprint("h", 20+i), "newcomer", 1, time.Hour))
				}
				s := Compute(in, now, cfg)
				share := s.Share(isSybil)
				shares = append(shares, share)
				bound := sybilBound(s, cfg, attack)
				if share > bound*1.000001 {
					t.Errorf("seed %d, k %d, %d sybils: share %.5f above the bound %.5f", seed, k, n, share, bound)
				}
				best, bestSybil := s.Reliability("newcomer"), ""
				s.Each(func(p peer.ID, sc Score) {
					if isSybil(p) && sc.Reliability >= best {
						bestSybil = fmt.Sprintf("%s at %.4f (%+v)", p, sc.Reliability, sc)
					}
				})
				if seed == 0 {
					top := 0.0
					s.Each(func(p peer.ID, sc Score) {
						if isSybil(p) {
							top = max(top, sc.Reliability)
						}
					})
					t.Logf("k %d, %d sybils: share %.5f (bound %.5f); newcomer %.4f, best sybil %.4f, prior %.2f", k, n, share, bound, best, top, cfg.Prior)
				}
				if bestSybil != "" {
					t.Errorf("seed %d, k %d, %d sybils: the newcomer at %.4f is outranked by %s", seed, k, n, best, bestSybil)
				}
			}
			if seed == 0 {
				t.Logf("k %d: the Sybils' share of trust with 10 keys %.5f, with 1,000 keys %.5f", k, shares[0], shares[1])
			}
			if shares[1] > shares[0]*1.5+1e-4 {
				t.Errorf("seed %d, k %d: the Sybils' share grew from %.5f (10 keys) to %.5f (1,000 keys)", seed, k, shares[0], shares[1])
			}
		}
	}
}

// A dispute shrinks what a provider earned above the prior, by a bounded
// amount that fades; it never takes a provider below the prior, so a
// griefer copying an honest provider's UUIDs cannot sink it below one
// with no history, and gains nothing itself.
func TestADisputeIsBoundedAndFades(t *testing.T) {
	receipts := []Receipt{good("me", "honest", 2, time.Hour), good("me", "honest", 2, 2*time.Hour)}
	clean := Compute(Inputs{Self: "me", Receipts: receipts}, now, Config{}).Reliability("honest")
	var disputes []Dispute
	for range 20 { // the griefer disputes again and again
		disputes = append(disputes, Dispute{A: "honest", B: "griefer", At: now})
	}
	s := Compute(Inputs{Self: "me", Receipts: receipts, Disputes: disputes}, now, Config{})
	prior := DefaultConfig().Prior
	if got := s.Reliability("honest"); got >= clean || got < prior+(clean-prior)*(1-DefaultConfig().MaxShrink)-1e-12 {
		t.Errorf("disputed: %.4f; clean %.4f, prior %.4f: want it lower, by at most half the surplus", got, clean, prior)
	}
	if got := s.Reliability("griefer"); got > prior {
		t.Errorf("the griefer: %.4f, above the prior", got)
	}
	if sc := s.Of("honest"); sc.Disputes != 20 {
		t.Errorf("disputes counted: %d", sc.Disputes)
	}
	later := Compute(Inputs{Self: "me", Receipts: receipts, Disputes: disputes}, now.Add(14*24*time.Hour), Config{})
	cleanLater := Compute(Inputs{Self: "me", Receipts: receipts}, now.Add(14*24*time.Hour), Config{})
	if got, want := later.Reliability("honest"), cleanLater.Reliability("honest"); want-got > 0.001 {
		t.Errorf("two weeks on, the dispute still takes %.4f", want-got)
	}
}

// Receipts fade: a provider's good record from a year ago counts for
// little against a failure today.
func TestReceiptsDecay(t *testing.T) {
	in := Inputs{Self: "me", Receipts: []Receipt{
		good("me", "p", 3, 365*24*time.Hour), good("me", "p", 3, 366*24*time.Hour),
		{Renter: "me", Provider: "p", Kind: ProviderFault, Hours: 1, At: now, CoSigned: true},
	}}
	if got := Compute(in, now, Config{}).Reliability("p"); got >= DefaultConfig().Prior {
		t.Errorf("an old good record and a fresh failure: %.3f, want below the prior", got)
	}
}

// Path says how trust reached a provider.
func TestPathFollowsTheTrust(t *testing.T) {
	in := Inputs{Self: "me", Receipts: []Receipt{good("me", "a", 1, 0), good("b", "a", 1, 0), good("b", "c", 1, 0)}}
	s := Compute(in, now, Config{})
	var names []string
	for _, p := range s.Path("c") {
		names = append(names, string(p))
	}
	if got := strings.Join(names, " "); got != "me a b c" {
		t.Errorf("path to c: %s", got)
	}
	if s.Path("nobody") != nil {
		t.Error("a path to an unknown peer")
	}
}

// The same inputs rank alike, whatever their order.
func TestComputeIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	receipts := world(r, 30, 10, 300)
	a := Compute(Inputs{Self: "me", Receipts: receipts}, now, Config{})
	r.Shuffle(len(receipts), func(i, j int) { receipts[i], receipts[j] = receipts[j], receipts[i] })
	b := Compute(Inputs{Self: "me", Receipts: receipts}, now, Config{})
	a.Each(func(p peer.ID, sc Score) {
		if d := sc.Reliability - b.Reliability(p); d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: %.12f then %.12f", p, sc.Reliability, b.Reliability(p))
		}
	})
}
