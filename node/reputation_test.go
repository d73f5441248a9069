package node

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/attest/attesttest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/trust"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// A completed rental raises the provider in its renter's view and the
// renter in its provider's, on receipts both signed; the scores rest on
// the stored records, so a restarted renter ranks the same; and the
// matcher weighs them (issue 12).
func TestACompletedLeaseRaisesBothPartiesAndSurvivesARestart(t *testing.T) {
	t.Parallel()
	forEachNet(t, testACompletedLeaseRaisesBothPartiesAndSurvivesARestart)
}

func testACompletedLeaseRaisesBothPartiesAndSurvivesARestart(t *testing.T, net testNet) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarmNet(t, net, nil, nil)
	prior := reputation.DefaultConfig().Prior
	if v, err := renter.Reputation(context.Background(), prov.id.String()); err != nil || v.Reliability != prior || v.Basis != "0.60: no history" || len(v.Path) != 0 {
		t.Fatalf("before any lease: %+v, %v", v, err)
	}
	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("rent: %v (%+v)", err, res.Receipt)
	}
	var after float64
	waitFor(t, 10*time.Second, "the renter counts the receipt", func() bool {
		v, err := renter.Reputation(context.Background(), prov.id.String())
		after = v.Reliability
		return err == nil && v.Receipts == 1 && v.Trusted == 1 && v.Reliability > prior && len(v.Path) == 2
	})
	if renter.reputation.Reliability(prov.id) != after {
		t.Errorf("the matcher's source says %.3f, the API %.3f", renter.reputation.Reliability(prov.id), after)
	}
	waitFor(t, 10*time.Second, "the provider counts the renter", func() bool {
		v, err := prov.Reputation(context.Background(), renter.id.String())
		return err == nil && v.AsRenter > prior
	})
	offers, err := renter.Offers(api.OfferQuery{})
	if err != nil || len(offers) != 1 || offers[0].Reliability != after || !strings.Contains(offers[0].Basis, "1 receipts, 1 via trusted peers") {
		t.Errorf("offers: %+v, %v", offers, err)
	}

	repo := renter.repo
	renter.Close()
	renter = startNode(t, repo, net.on(Options{Light: true}))
	waitFor(t, 10*time.Second, "the restarted renter ranks the provider as before", func() bool {
		v, err := renter.Reputation(context.Background(), prov.id.String())
		return err == nil && math.Abs(v.Reliability-after) < 1e-6 // what a few seconds of decay take
	})
	if _, err := renter.Reputation(context.Background(), "not-a-peer"); err == nil || !strings.Contains(err.Error(), `peer "not-a-peer"`) {
		t.Errorf("a malformed peer ID: %v", err)
	}
}

// A provider that completed leases for a renter this node trusts (one of
// its seeds) rises in its view, though it never dealt with the provider:
// it learns the provider's co-signed receipts over the receipts protocol
// (issue 12). Each receipt counts by the trust of the renter that signed
// it; without the seed, the same receipts would count for nothing.
func TestAProviderRisesForARenterThatLearnsItsReceipts(t *testing.T) {
	t.Parallel()
	forEachNet(t, testAProviderRisesForARenterThatLearnsItsReceipts)
}

func testAProviderRisesForARenterThatLearnsItsReceipts(t *testing.T, net testNet) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarmNet(t, net, nil, nil)
	rentCompleted(t, renter, image, 5)
	clk := clock.NewFake()
	third := seededRenter(t, net, "third", prov, renter, Options{Light: true, Clock: clk})
	waitFor(t, 15*time.Second, "the provider's offer in the third renter's book", func() bool { return offeredGPUs(third, prov) == 8 })
	prior := reputation.DefaultConfig().Prior
	if sc := third.reputation.Scores().Of(prov.id); sc.Reliability != prior {
		t.Fatalf("before learning: %+v", sc)
	}
	waitFor(t, 15*time.Second, "the third renter learns the provider's receipts in the background", func() bool {
		clk.Advance(trust.LearnEvery) // a learning round at each look
		sc := third.reputation.Scores().Of(prov.id)
		return sc.Receipts == 5 && sc.Trusted == 5 && sc.Reliability > prior
	})
	v, _ := third.Reputation(context.Background(), prov.id.String())
	if len(v.Path) != 2 || v.Path[0] != renter.id.String() || v.Path[1] != prov.id.String() {
		t.Errorf("trust reached the provider by %v; want from the seed", v.Path)
	}
	// Asked about the provider, a renter that has not learned of it yet
	// asks it at once.
	fourth := seededRenter(t, net, "fourth", prov, renter, Options{Light: true, Clock: clock.NewFake()})
	waitFor(t, 15*time.Second, "the provider's offer in the fourth renter's book", func() bool { return offeredGPUs(fourth, prov) == 8 })
	if v, err := fourth.Reputation(context.Background(), prov.id.String()); err != nil || v.Receipts != 5 || v.Reliability <= prior {
		t.Errorf("asked at once: %+v, %v", v, err)
	}
}

// Two providers that claim one GPU UUID are a dispute in the eyes of a
// node that attested both: it lowers what each earned above the prior,
// boundedly, and takes neither below a provider with no history, so a
// griefer copying an honest provider's UUIDs gains nothing by it and
// cannot sink its victim (issue 12). A dispute proves nothing: neither is
// excluded.
func TestACopiedUUIDIsADisputeThatSinksNoOne(t *testing.T) {
	t.Parallel()
	forEachNet(t, testACopiedUUIDIsADisputeThatSinksNoOne)
}

func testACopiedUUIDIsADisputeThatSinksNoOne(t *testing.T, net testNet) {
	fake, err := attest.NewFake("dgxh100") // one machine's UUIDs, sold twice
	if err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", nil), net.on(Options{}))
	honest, griefer := sellFake(t, net, boot, "honest", "dgxh100", fake), sellFake(t, net, boot, "griefer", "dgxh100", fake)
	renter := startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), net.on(Options{Light: true}))
	waitFor(t, 15*time.Second, "both offers in the renter's book", func() bool {
		return offeredGPUs(renter, honest) == 8 && offeredGPUs(renter, griefer) == 8
	})
	for _, p := range []*Node{honest, griefer} {
		if res, err := renter.Attest(context.Background(), api.AttestRequest{Peer: p.id.String()}); err != nil || !res.Verified {
			t.Fatalf("attest %s: %+v, %v", p.id, res, err)
		}
	}
	prior := reputation.DefaultConfig().Prior
	waitFor(t, 10*time.Second, "the renter counts the dispute against both", func() bool {
		h, _ := renter.Reputation(context.Background(), honest.id.String())
		g, _ := renter.Reputation(context.Background(), griefer.id.String())
		return h.Disputes == 1 && g.Disputes == 1
	})
	for _, p := range []*Node{honest, griefer} {
		v, _ := renter.Reputation(context.Background(), p.id.String())
		if v.Reliability < prior || !strings.Contains(v.Basis, "1 dispute") {
			t.Errorf("%s: %+v; want at least the prior %.2f, and the dispute in its basis", p.id, v, prior)
		}
		if renter.market.Excluded(p.id) {
			t.Errorf("%s is excluded over a dispute", p.id)
		}
	}
}

// A provider may ask a record of the renters that would hold its
// calendar longest: with min_renter_score set, a gold lease from a renter
// with no history is refused, a silver one is not, and once that renter
// has a countersigned receipt here its gold lease is taken (issue 12).
func TestAProviderAsksARecordForGoldLeases(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Provider.MinRenterScore = 0.65 })
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	gold := func(l *pb.Lease) { l.Tier, l.Bid.Tier = pb.Tier_TIER_GOLD, pb.Tier_TIER_GOLD }
	if r := proposeRaw(t, renter, prov, gold); r.Lease != nil || r.Code != pb.RejectCode_REJECT_RENTER_SCORE || !strings.Contains(r.Reason, "scores 0.60 as a renter here; this provider asks 0.65") {
		t.Fatalf("a gold lease from a renter with no history: %v %q", r.Code, r.Reason)
	}
	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("a silver lease from a renter with no history: %v (%+v)", err, res.Receipt)
	}
	waitFor(t, 10*time.Second, "the provider counts the renter's receipt", func() bool {
		v, err := prov.Reputation(context.Background(), renter.id.String())
		return err == nil && v.AsRenter >= 0.65
	})
	if r := proposeRaw(t, renter, prov, gold); r.Lease == nil {
		t.Errorf("a gold lease from a renter with a record: %v %q", r.Code, r.Reason)
	}
}

// lyingSource is a GPU source that, once told to lie, drops a GPU from
// what it reports: a provider whose documents, moments apart, cannot
// both be true.
type lyingSource struct {
	attest.GPUSource
	lie atomic.Bool
}

func (s *lyingSource) Inventory(ctx context.Context) (attest.Inventory, error) {
	inv, err := s.GPUSource.Inventory(ctx)
	if s.lie.Load() && len(inv.GPUs) > 1 {
		inv.GPUs = inv.GPUs[1:]
	}
	return inv, err
}

// A node that holds two documents one provider signed within the
// conflict window, listing different GPUs, gossips them as evidence
// itself: it and every other node exclude the provider (issue 12).
func TestANodeGossipsTheContradictionsItHolds(t *testing.T) {
	t.Parallel()
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	src := &lyingSource{GPUSource: fake}
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.Price = true, "fake:dgxh100", "2.00"
	})), Options{GPUSource: src})
	checker := startNode(t, testRepo(t, "checker", bootstrapFrom(boot)), Options{})
	waitFor(t, 15*time.Second, "the provider's offer in the checker's book", func() bool { return offeredGPUs(checker, prov) == 8 })
	waitFor(t, 15*time.Second, "the checker and the bootstrap node meshed on evidence", func() bool {
		return slices.Contains(checker.gossip.Mesh(p2p.TopicEvidence), boot.id)
	})
	attestOnce := func() {
		t.Helper()
		if res, err := checker.Attest(context.Background(), api.AttestRequest{Peer: prov.id.String()}); err != nil || !res.Verified {
			t.Fatalf("attest: %+v, %v", res, err)
		}
	}
	attestOnce()
	if checker.market.Excluded(prov.id) {
		t.Fatal("excluded after one document")
	}
	src.lie.Store(true)
	attestOnce() // seven GPUs where there were eight, within the minute
	// Its offer, of eight, is not covered by the answer: a failure too.
	waitFor(t, 10*time.Second, "the checker counts the uncovered offer", func() bool {
		v, err := checker.Reputation(context.Background(), prov.id.String())
		return err == nil && v.Failures == 1
	})
	for _, n := range []*Node{checker, boot} {
		waitFor(t, 10*time.Second, "the provider excluded on the checker's evidence", func() bool { return n.market.Excluded(prov.id) })
	}
	// A node that joins later learns it by evidence sync, and checks it.
	late := startNode(t, testRepo(t, "late", bootstrapFrom(boot)), Options{Light: true})
	waitFor(t, 15*time.Second, "the late joiner excludes the provider too", func() bool { return late.market.Excluded(prov.id) })
}

// When CC certificates settle it, two peers answering with one GPU is no
// dispute but proof: one GPU's key signed reports bound to each of them.
// The node that saw both gossips the evidence, and both are excluded.
func TestOneGPUAnsweringForTwoPeersIsProof(t *testing.T) {
	t.Parallel()
	fake, err := attest.NewFake("dgxh200") // one machine, its GPUs' keys answering for two peers
	if err != nil {
		t.Fatal(err)
	}
	ca := attesttest.NewCCAuthority(t)
	fake.EnableCC(ca.Evidence)
	rootFile := filepath.Join(t.TempDir(), "nvidia-root.pem")
	if err := os.WriteFile(rootFile, ca.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	a, b := sellFake(t, loopback{}, boot, "a", "dgxh200", fake), sellFake(t, loopback{}, boot, "b", "dgxh200", fake)
	checker := startNode(t, testRepo(t, "checker", both(bootstrapFrom(boot), func(c *config.Config) { c.Attest.CCRootCert = rootFile })), Options{})
	waitFor(t, 15*time.Second, "both offers in the checker's book", func() bool {
		return offeredGPUs(checker, a) == 8 && offeredGPUs(checker, b) == 8
	})
	for _, p := range []*Node{a, b} {
		if res, err := checker.Attest(context.Background(), api.AttestRequest{Peer: p.id.String()}); err != nil || !res.Verified || res.CC != attest.CCVerified {
			t.Fatalf("attest %s: %+v, %v", p.id, res, err)
		}
	}
	for _, p := range []*Node{a, b} {
		waitFor(t, 10*time.Second, "the checker excludes both on the CC proof", func() bool { return checker.market.Excluded(p.id) })
		if v, _ := checker.Reputation(context.Background(), p.id.String()); v.Disputes != 0 {
			t.Errorf("%s: a dispute counted where CC settled it: %+v", p.id, v)
		}
	}
}

// sellFake starts a provider bootstrapped from boot that sells the fake
// machine src at 2.00: several may share one src, and so its GPUs.
func sellFake(t *testing.T, net testNet, boot *Node, name, machine string, src attest.GPUSource) *Node {
	t.Helper()
	return startNode(t, testRepo(t, name, both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.Price = true, "fake:"+machine, "2.00"
	})), net.on(Options{GPUSource: src}))
}

// A rental asks its best candidates for their receipts before it tries
// them: for a fresh renter, a provider that completed leases for a renter
// it trusts outranks a slightly cheaper one with no history (issue 12).
func TestARentalWeighsTheReceiptsItLearns(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	rentCompleted(t, renter, image, 5)
	cheaper := startNode(t, testRepo(t, "cheaper", both(bootstrapFrom(prov), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.Price = true, "fake:dgxh100", "1.99"
		c.Provider.Tiers, c.Provider.MinDuration = []string{"gold", "silver", "bronze"}, config.Dur(time.Minute)
	})), Options{})
	removeJobsOf(t, cheaper)
	fresh := seededRenter(t, loopback{}, "fresh", prov, renter, Options{Light: true})
	waitFor(t, 15*time.Second, "both offers in the fresh renter's book", func() bool {
		return offeredGPUs(fresh, prov) == 8 && offeredGPUs(fresh, cheaper) == 8
	})
	var said []string
	res, err := fresh.Rent(context.Background(), rentRequest(image, "true"), RentOutput{Progress: func(s string) { said = append(said, s) }})
	if err != nil || res.Lease.Provider != prov.id.String() {
		t.Fatalf("rented from %s (%v); want the provider with a record, %s; said %q", res.Lease.Provider, err, prov.id, said)
	}
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "learned the receipts") }) {
		t.Errorf("the rental did not say it learned receipts: %q", said)
	}
}

// A Sybil ring on real hosts (issue 12): a provider whose 256 receipts
// (the most one answer carries) are all co-signed by 100 keys of its own
// ring, each lease of 8 hours, is asked for them like any provider, and
// they verify; but no trust reaches those keys, so they count for
// nothing. A provider with 5 receipts co-signed by a renter this node
// trusts outranks it.
func TestASybilRingsReceiptsCountForNothing(t *testing.T) {
	t.Parallel()
	forEachNet(t, testASybilRingsReceiptsCountForNothing)
}

func testASybilRingsReceiptsCountForNothing(t *testing.T, net testNet) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarmNet(t, net, nil, nil)
	rentCompleted(t, renter, image, 5)
	// The ring: a host that serves its receipts, and an offer of its key.
	sybilKey, _, _ := crypto.GenerateEd25519Key(nil)
	sybil, _ := peer.IDFromPrivateKey(sybilKey)
	h := net.bare(t, sybilKey)
	var ring []crypto.PrivKey
	for range 100 {
		k, _, _ := crypto.GenerateEd25519Key(nil)
		ring = append(ring, k)
	}
	var receipts [][]byte
	for i := range p2p.MaxReceiptsReply {
		k := ring[i%len(ring)]
		id, _ := peer.IDFromPrivateKey(k)
		rc := &pb.Receipt{Version: market.Version, LeaseId: fmt.Sprint("ring-", i), Renter: []byte(id), Provider: []byte(sybil),
			Outcome: pb.Outcome_OUTCOME_COMPLETED, EndUnixMs: time.Now().UnixMilli(), MeteredSeconds: 8 * 3600, Swarm: prov.Swarm().Tag()}
		cs, err := market.NewCoSigned(sybilKey, market.Provider, rc)
		if err == nil {
			err = market.CoSign[*pb.Receipt](k, market.Renter, cs)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(cs)
		receipts = append(receipts, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p2p.ServeReceipts(p2p.Server{Host: h, Swarm: prov.Swarm(), Ctx: ctx}, func(context.Context, peer.ID) ([][]byte, error) { return receipts, nil })
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.Price = prov.cfg.Provider.Price
	cfg.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	o, err := offer.Build(cfg, sybil, 1, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	o.Header.Swarm = prov.Swarm().Tag()
	env, err := market.Sign(sybilKey, o)
	if err != nil {
		t.Fatal(err)
	}

	fresh := seededRenter(t, net, "fresh", prov, renter, Options{Light: true})
	waitFor(t, 15*time.Second, "the provider's offer in the fresh renter's book", func() bool { return offeredGPUs(fresh, prov) == 8 })
	if err := fresh.link.Publish(context.Background(), p2p.TopicOffers, env); err != nil {
		t.Fatal(err)
	}
	if err := fresh.host.Connect(context.Background(), peer.AddrInfo{ID: sybil, Addrs: h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the ring's offer in the fresh renter's book", func() bool {
		_, ok := fresh.market.Snapshot().Offer(sybil, o.Header.Id)
		return ok
	})

	s, err := fresh.Reputation(context.Background(), sybil.String())
	if err != nil || s.Receipts != p2p.MaxReceiptsReply || s.Trusted != 0 {
		t.Fatalf("the ring, asked for its receipts: %+v, %v; want %d receipts, none via trusted peers", s, err, p2p.MaxReceiptsReply)
	}
	honest, err := fresh.Reputation(context.Background(), prov.id.String())
	if err != nil || honest.Receipts != 5 || honest.Reliability <= s.Reliability {
		t.Errorf("the honest provider at %.3f (%s), the ring's at %.3f (%s); want the honest one above", honest.Reliability, honest.Basis, s.Reliability, s.Basis)
	}
}

// rentCompleted has renter rent n times, each lease running "true" to
// completion.
func rentCompleted(t *testing.T, renter *Node, image string, n int) {
	t.Helper()
	for i := range n {
		res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
		if err != nil || res.Receipt.Outcome != views.LeaseCompleted {
			t.Fatalf("rent %d: %v (%+v)", i, err, res.Receipt)
		}
	}
}

// seededRenter starts a renter bootstrapped from boot whose one trust
// seed is seed.
func seededRenter(t *testing.T, net testNet, name string, boot, seed *Node, o Options) *Node {
	t.Helper()
	return startNode(t, testRepo(t, name, both(bootstrapFrom(boot), func(c *config.Config) {
		c.Reputation.Seeds = []string{seed.id.String()}
	})), net.on(o))
}

// Seeds that see something (issue 28): a bootstrap peer leases nothing,
// so a new renter whose only seed is its bootstrap peer ranks every
// provider at the prior, a tie. A new renter that chose no seeds adopts
// those its bootstrap peer's operator chose, and ranks: the provider with
// three completed leases through the chosen seed stands above the prior.
// `idlegrid reputation` shows each seed and where it came from.
func TestANewRenterAdoptsTheSeedsItsBootstrapPeersOperatorChose(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	rentCompleted(t, renter, image, 3)
	entry := startNode(t, testRepo(t, "entry", both(bootstrapFrom(prov), func(c *config.Config) {
		c.Reputation.Seeds = []string{renter.id.String()}
	})), Options{})
	bare := startNode(t, testRepo(t, "bare", bootstrapFrom(prov)), Options{})
	newcomer := startNode(t, testRepo(t, "newcomer", bootstrapFrom(entry)), Options{Light: true})
	plain := startNode(t, testRepo(t, "plain", bootstrapFrom(bare)), Options{Light: true})
	waitFor(t, 15*time.Second, "the provider's offer in both new renters' books", func() bool {
		return offeredGPUs(newcomer, prov) == 8 && offeredGPUs(plain, prov) == 8
	})
	waitFor(t, 15*time.Second, "the newcomer adopts the seed its bootstrap peer's operator chose", func() bool {
		return slices.Contains(newcomer.reputation.Seeds(), renter.id)
	})
	prior := reputation.DefaultConfig().Prior
	v, err := newcomer.Reputation(context.Background(), prov.id.String())
	if err != nil || v.Receipts != 3 || v.Reliability <= prior {
		t.Errorf("the newcomer's view of the provider: %+v (%v); want its 3 receipts above the prior %.2f", v, err, prior)
	}
	want := []api.SeedView{{Peer: entry.id.String(), From: SeedBootstrap}, {Peer: renter.id.String(), From: SeedInherited + entry.id.String()}}
	if !slices.Equal(v.Seeds, want) {
		t.Errorf("the newcomer's seeds %+v, want %+v", v.Seeds, want)
	}
	p, err := plain.Reputation(context.Background(), prov.id.String())
	if err != nil || p.Reliability != prior || !slices.Equal(p.Seeds, []api.SeedView{{Peer: bare.id.String(), From: SeedBootstrap}}) {
		t.Errorf("a renter whose bootstrap peer's operator chose no seeds: %+v (%v); want the prior, seeded by its bootstrap peer alone", p, err)
	}
}
