package reputation

import (
	"cmp"
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
		trusted := trustedRenters(Compute(in, now, cfg), 3)
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

// trustedRenters are this node ("me", a renter of the world) and the
// n−1 renters ("h…") s trusts most, each trusted.
func trustedRenters(s *Scores, n int) []peer.ID {
	var out []peer.ID
	s.Each(func(p peer.ID, sc Score) {
		if strings.HasPrefix(string(p), "h") && sc.Trust >= DefaultConfig().TrustedAt {
			out = append(out, p)
		}
	})
	slices.SortFunc(out, func(a, b peer.ID) int {
		if c := cmp.Compare(s.Of(b).Trust, s.Of(a).Trust); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return append([]peer.ID{"me"}, out[:min(n-1, len(out))]...)
}
