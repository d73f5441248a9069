package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/attest/attesttest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/swarm"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/test"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// asProvider sells a group of GPUs at a price from a country.
func asProvider(model string, count, vram int, price, country string) func(*config.Config) {
	return func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUs = []config.GPUConfig{{Model: model, Count: count, VRAMGiB: vram, ComputeCapability: "8.0", Interconnect: "pcie"}}
		c.Provider.Price = price
		c.Provider.Country = country
	}
}

func both(fs ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

func bookHolds(n *Node, want int) func() bool {
	return func() bool {
		offers, err := n.Offers(api.OfferQuery{})
		return err == nil && len(offers) == want
	}
}

func TestMarketAcrossNodes(t *testing.T) {
	t.Parallel()
	log := keepLog(t)
	boot := startNode(t, testRepo(t, "boot", nil), Options{Logger: log.node("boot")})
	cheap := startNode(t, testRepo(t, "cheap", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.10", "DE"))), Options{Logger: log.node("cheap")})
	dear := startNode(t, testRepo(t, "dear", both(bootstrapFrom(boot), asProvider("A100", 8, 80, "2.20", "FR"))), Options{Logger: log.node("dear")})
	renter := startNode(t, testRepoWith(t, "renter", repo.InitOptions{Profile: config.ProfileRenter}, bootstrapFrom(boot)), Options{Logger: log.node("renter")})
	all := []*Node{boot, cheap, dear, renter}
	for _, n := range all {
		waitFor(t, 15*time.Second, "every book holds both offers", bookHolds(n, 2))
	}

	// Filters and sorting.
	offers, err := renter.Offers(api.OfferQuery{Country: "de"})
	if err != nil || len(offers) != 1 || offers[0].Provider != cheap.id.String() || offers[0].Price != "1.10" {
		t.Errorf("offers in DE: %+v, %v", offers, err)
	}
	offers, _ = renter.Offers(api.OfferQuery{MaxPrice: "2.00"})
	if len(offers) != 1 {
		t.Errorf("offers at most 2.00: %d, want 1", len(offers))
	}
	if _, err := renter.Offers(api.OfferQuery{MaxPrice: "cheap"}); err == nil {
		t.Error("a bad max_price was accepted")
	}
	offers, err = renter.Offers(api.OfferQuery{Where: "num_gpus>=8 gpu_ram=80 price<3"})
	if err != nil || len(offers) != 1 || offers[0].Provider != dear.id.String() {
		t.Errorf("offers where num_gpus>=8: %+v, %v", offers, err)
	}
	if _, err := renter.Offers(api.OfferQuery{Where: "num_gpu>=8"}); err == nil || !strings.Contains(err.Error(), `did you mean "num_gpus"`) {
		t.Errorf("a bad where: %v", err)
	}

	// The matcher ranks the cheaper provider first and says why nothing
	// fits a request no one can meet.
	res, err := renter.Match(context.Background(), api.BidRequest{GPUs: []string{"A100"}, Count: 2, Hours: 4, Tier: "silver", MaxPrice: "3.00"})
	if err != nil || len(res.Candidates) != 2 || res.Candidates[0].Offer.Provider != cheap.id.String() {
		t.Fatalf("match: %+v, %v", res, err)
	}
	if got := res.Candidates[0].Total; got != "8.80" {
		t.Errorf("total for 2 A100 × 4 h at 1.10 = %s, want 8.80", got)
	}
	res, err = renter.Match(context.Background(), api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, Tier: "silver", MaxPrice: "3.00"})
	if err != nil || len(res.Candidates) != 0 || !strings.Contains(res.Explanation, "2 offers") {
		t.Errorf("an unmeetable match: %+v, %v", res, err)
	}

	// A bid gossiped to the swarm comes back with a signed quote from each
	// provider whose offer fits it: once every node is in a mesh on every
	// topic (the book syncs without one), the bid reaches both.
	waitFor(t, 15*time.Second, "every node in a mesh on every topic", meshOnEveryTopic(all))
	// The bid collects quotes for its whole wait: 5 s leaves the race
	// detector's slowed providers time to answer.
	bid, err := renter.PlaceBid(context.Background(), api.BidRequest{GPUs: []string{"A100"}, Count: 4, Hours: 1, Tier: "silver", MaxPrice: "3.00", WaitMillis: 5000})
	if err != nil {
		t.Fatal(err)
	}
	providers := map[string]bool{}
	for _, q := range bid.Quotes {
		providers[q.Provider] = true
	}
	if len(bid.Quotes) != 2 || !providers[cheap.id.String()] || !providers[dear.id.String()] {
		t.Errorf("quotes: %+v", bid.Quotes)
		for name, n := range map[string]*Node{"boot": boot, "cheap": cheap, "dear": dear} {
			t.Logf("%s: %s", name, quoteAccount(n, renter))
		}
		t.Logf("renter: bids mesh %v, bids topic peers %v", renter.gossip.Mesh(p2p.TopicBids), renter.gossip.Topic(p2p.TopicBids).ListPeers())
	}

	// A node that restarts (its book lives in memory, its sequence numbers
	// on disk) takes the offers back by syncing.
	renterRepo := renter.repo
	renter.Close()
	renter = startNode(t, renterRepo, Options{Logger: log.node("renter")})
	waitFor(t, 15*time.Second, "the restarted renter's book holds both offers again", bookHolds(renter, 2))

	// A node that joins late gets the whole book by syncing, without
	// waiting for a re-publication.
	late := startNode(t, testRepo(t, "late", bootstrapFrom(boot)), Options{Logger: log.node("late")})
	waitFor(t, 15*time.Second, "the late node's book holds both offers", bookHolds(late, 2))

	// A provider that stops withdraws its offer from every book.
	dear.Close()
	for name, n := range map[string]*Node{"boot": boot, "cheap": cheap, "renter": renter, "late": late} {
		waitFor(t, 15*time.Second, name+" drops the withdrawn offer", bookHolds(n, 1))
	}
}

// A renter's bid may reach a provider through a third peer before the
// two have met: the renter, a DHT client, is in no routing table, and the
// provider has no address for it. The provider finds it in the DHT (the
// peer it is connected to answers for it) and its quote arrives.
func TestAQuoteReachesARenterKnownOnlyFromItsBid(t *testing.T) {
	t.Parallel()
	log := keepLog(t)
	boot := startNode(t, testRepo(t, "boot", nil), Options{Logger: log.node("boot")})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.10", "DE"))), Options{Logger: log.node("prov")})
	renter := startNode(t, testRepoWith(t, "renter", repo.InitOptions{Profile: config.ProfileRenter}, bootstrapFrom(boot)), Options{Logger: log.node("renter")})
	waitFor(t, 15*time.Second, "the renter's book holds the offer", bookHolds(renter, 1))
	waitFor(t, 15*time.Second, "the bootstrap peer relays bids between the two", func() bool {
		return slices.Contains(renter.gossip.Mesh(p2p.TopicBids), boot.id) && slices.Contains(boot.gossip.Mesh(p2p.TopicBids), prov.id)
	})
	// The provider forgets the renter: no connection, no address. The bid
	// then comes to it through the bootstrap peer (the renter publishes
	// once its router has seen the provider go). An exchange the two
	// began when they met (a book or evidence sync, a coordinate) may
	// dial again at once, and identify gives the provider the renter's
	// addresses again: it forgets until the renter's router shows it gone.
	gone := func() bool { return !slices.Contains(renter.gossip.Topic(p2p.TopicBids).ListPeers(), prov.id) }
	for try := 0; ; try++ {
		prov.host.Peerstore().ClearAddrs(renter.id)
		prov.host.Network().ClosePeer(renter.id)
		if waitUntil(2*time.Second, gone) {
			break
		}
		if try == 5 {
			t.Fatal("the renter's router never saw the provider go: the two connect again at once, each time")
		}
	}
	bid, err := renter.PlaceBid(context.Background(), api.BidRequest{GPUs: []string{"A100"}, Count: 4, Hours: 1, Tier: "silver", MaxPrice: "3.00", WaitMillis: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Quotes) != 1 || bid.Quotes[0].Provider != prov.id.String() {
		t.Errorf("quotes: %+v; the provider: %s", bid.Quotes, quoteAccount(prov, renter))
	}
}

// A bid's issuer costs nothing to make up: the lookup of one that is
// nowhere gives up within its bound, freeing the quoting slot.
func TestAQuoteToABidderThatIsNowhereGivesUp(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.10", "DE"))), Options{})
	waitFor(t, 15*time.Second, "the provider's book holds its offer", bookHolds(prov, 1))
	nowhere, err := test.RandPeerID()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = prov.link.SendQuote(context.Background(), nowhere, []byte("quote"))
	took := time.Since(start)
	if err == nil || took > 2*swarm.QuoteLocateWait {
		t.Errorf("a quote to a bidder that is nowhere: %v after %s; want an error within %s", err, took.Round(time.Millisecond), 2*swarm.QuoteLocateWait)
	}
}

// quoteAccount says what became of the bids n received: how many, the
// quotes it sent and the bids it did not quote, by why; and how it is
// connected to the renter.
func quoteAccount(n, renter *Node) string {
	unquoted := map[string]float64{}
	for _, why := range []string{metrics.UnquotedQueueFull, metrics.UnquotedNoFit, metrics.UnquotedUnsigned, metrics.UnquotedUndelivered} {
		if v := testutil.ToFloat64(n.metrics.BidsUnquoted.WithLabelValues(why)); v > 0 {
			unquoted[why] = v
		}
	}
	return fmt.Sprintf("bids received %v, quotes sent %v, unquoted %v; %d connections to the renter; bids mesh %v",
		testutil.ToFloat64(n.metrics.GossipReceived.WithLabelValues(p2p.TopicBids)), testutil.ToFloat64(n.metrics.QuotesSent),
		unquoted, len(n.host.Network().ConnsToPeer(renter.id)), n.gossip.Mesh(p2p.TopicBids))
}

func TestProviderRestartIsNotStale(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	r := testRepo(t, "prov", both(bootstrapFrom(boot), asProvider("L40S", 2, 48, "0.80", "NL")))
	prov := startNode(t, r, Options{})
	waitFor(t, 15*time.Second, "the offer reaches the bootstrap node", bookHolds(boot, 1))
	first, _ := boot.Offers(api.OfferQuery{})
	prov.Close()
	waitFor(t, 15*time.Second, "the withdrawal reaches the bootstrap node", bookHolds(boot, 0))
	startNode(t, r, Options{})
	waitFor(t, 15*time.Second, "the restarted provider's offer is taken", bookHolds(boot, 1))
	again, _ := boot.Offers(api.OfferQuery{})
	if again[0].Seq <= first[0].Seq {
		t.Errorf("restarted provider's seq %d is not above %d", again[0].Seq, first[0].Seq)
	}
}

// offeredGPUs is how many GPUs n's book holds from provider p, or -1.
func offeredGPUs(n, p *Node) int {
	offers, _ := n.Offers(api.OfferQuery{})
	for _, o := range offers {
		if o.Provider == p.id.String() {
			total := 0
			for _, g := range o.GPUs {
				total += int(g.Count)
			}
			return total
		}
	}
	return -1
}

func TestOffersFollowTheGPUs(t *testing.T) {
	t.Parallel()
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake()
	boot := startNode(t, testRepo(t, "boot", nil), Options{Clock: clk})
	watch := time.Second
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh100"
		c.Provider.Share = []string{"0", "1", "2", "3"}
		c.Provider.ThermalCapC = 85
		c.Provider.WatchInterval = config.Dur(watch)
	})), Options{GPUSource: fake, Clock: clk})
	waitFor(t, 15*time.Second, "4 shared H100s offered", func() bool { return offeredGPUs(boot, prov) == 4 })
	offers, _ := boot.Offers(api.OfferQuery{})
	if g := offers[0].GPUs[0]; g.Model != "H100 SXM" || g.VRAMGiB != 80 || g.ComputeCapability != "9.0" {
		t.Errorf("offered group %+v", g)
	}

	fake.SetBusy(1, true)
	clk.Advance(watch) // the provider's next look at its GPUs
	waitFor(t, 10*time.Second, "a busy GPU leaves the offer", func() bool { return offeredGPUs(boot, prov) == 3 })
	for i := range 8 {
		fake.SetTemperature(i, 90)
	}
	clk.Advance(watch)
	waitFor(t, 10*time.Second, "the offer is withdrawn while every GPU is past the thermal cap", func() bool { return offeredGPUs(boot, prov) == -1 })
	for i := range 8 {
		fake.SetTemperature(i, 40)
	}
	fake.SetBusy(1, false)
	clk.Advance(watch)
	waitFor(t, 10*time.Second, "all 4 come back", func() bool { return offeredGPUs(boot, prov) == 4 })
}

func TestSellable(t *testing.T) {
	p := config.DefaultProviderConfig()
	p.ThermalCapC, p.BusyUtilization = 80, 10
	inv := attest.Inventory{CUDAVersion: "12.4", DriverVersion: "550.54.15", GPUs: []attest.GPU{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, ComputeCapability: "8.0", PCIeGeneration: 1, PCIeWidth: 8, PCIeMaxGeneration: 4, PCIeMaxWidth: 16, MemoryBandwidthGBps: 1555, FP32GFLOPS: 19491},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, ComputeCapability: "8.0", Processes: []attest.Process{{PID: 1}}},
		{Index: 2, UUID: "GPU-c", Name: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, ComputeCapability: "8.0", UtilizationPct: 50},
		{Index: 3, UUID: "GPU-d", Name: "NVIDIA A100-SXM4-40GB", MemoryBytes: 40 << 30, ComputeCapability: "8.0", TemperatureC: 81},
		{Index: 4, UUID: "GPU-e", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, ComputeCapability: "9.0"},
	}}
	groups, why := offer.Sellable(p, inv)
	a100 := config.GPUConfig{Model: "A100 SXM 40GB", Count: 1, VRAMGiB: 40, ComputeCapability: "8.0", CUDAVersion: "12.4", DriverVersion: "550.54.15",
		PCIeGeneration: 4, PCIeLanes: 16, MemoryBandwidthGBps: 1555, FP32GFLOPS: 19491}
	if len(groups) != 2 || groups[0] != a100 || groups[1].Model != "H100 SXM" || len(why) != 3 {
		t.Errorf("sellable = %+v, why %v", groups, why)
	}
	p.Share = []string{"GPU-e"}
	if groups, _ := offer.Sellable(p, inv); len(groups) != 1 || groups[0].Model != "H100 SXM" {
		t.Errorf("share by UUID: %+v", groups)
	}
	// A card NVML reports short of its marketed memory is sold as
	// marketed; one the catalog lacks by its name, found by PCI ID if
	// the name is new to the catalog.
	inv.GPUs = []attest.GPU{
		{Index: 0, UUID: "GPU-f", Name: "NVIDIA GeForce RTX 4090", MemoryBytes: 24564 << 20, ComputeCapability: "8.9"},
		{Index: 1, UUID: "GPU-g", Name: "NVIDIA Future 9000", MemoryBytes: 48 << 30, ComputeCapability: "12.0"},
		{Index: 2, UUID: "GPU-h", Name: "NVIDIA Renamed Board", PCIDeviceID: 0x268410de, MemoryBytes: 24564 << 20, ComputeCapability: "8.9"},
	}
	p.Share, inv.CUDAVersion, inv.DriverVersion = nil, "", ""
	groups, _ = offer.Sellable(p, inv)
	if len(groups) != 2 || groups[0] != (config.GPUConfig{Model: "Future 9000", Count: 1, VRAMGiB: 48, ComputeCapability: "12.0"}) ||
		groups[1] != (config.GPUConfig{Model: "RTX 4090", Count: 2, VRAMGiB: 24, ComputeCapability: "8.9"}) {
		t.Errorf("sellable = %+v", groups)
	}
}

// The standing attestation an offer names by hash is kept while the
// hardware stays: republishing (a GPU got busy) and restarting keep the
// hash, so a renter holding an older copy of the offer finds it covered;
// other hardware gets a new one.
func TestStandingAttestationLastsAsLongAsTheHardware(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	repo := testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.WatchInterval = true, "fake:dgxh100", config.Dur(time.Second)
	}))
	hashOf := func(p *Node, gpus int) []byte {
		t.Helper()
		var h []byte
		waitFor(t, 15*time.Second, fmt.Sprintf("an offer of %d GPUs in the bootstrap's book", gpus), func() bool {
			o, ok := boot.market.Snapshot().Offer(p.id, offer.ProviderOfferID)
			if ok && offeredGPUs(boot, p) == gpus {
				h = o.AttestationHash
			}
			return h != nil
		})
		return h
	}
	machine := func(seed string) *attest.Fake {
		f, err := attest.NewFakeSeeded("dgxh100", seed)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	clk := clock.NewFake()
	fake := machine("rack 1")
	prov := startNode(t, repo, Options{GPUSource: fake, Clock: clk})
	first := hashOf(prov, 8)
	fake.SetBusy(0, true)
	clk.Advance(time.Second) // the provider's next look at its GPUs
	if busy := hashOf(prov, 7); !bytes.Equal(busy, first) {
		t.Errorf("republished for a busy GPU, the standing attestation changed")
	}
	prov.Close()
	prov = startNode(t, repo, Options{GPUSource: machine("rack 1")})
	if restarted := hashOf(prov, 8); !bytes.Equal(restarted, first) {
		t.Errorf("restarted on the same GPUs, the standing attestation changed")
	}
	prov.Close()
	prov = startNode(t, repo, Options{GPUSource: machine("rack 2")})
	if moved := hashOf(prov, 8); bytes.Equal(moved, first) {
		t.Errorf("on other GPUs, the standing attestation stayed")
	}
}

func TestAttestationBetweenNodes(t *testing.T) {
	t.Parallel()
	fake, err := attest.NewFake("dgxh200")
	if err != nil {
		t.Fatal(err)
	}
	ca := attesttest.NewCCAuthority(t)
	rootFile := filepath.Join(t.TempDir(), "nvidia-root.pem")
	if err := os.WriteFile(rootFile, ca.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", func(c *config.Config) { c.Attest.CCRootCert = rootFile }), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh200"
	})), Options{GPUSource: fake})
	noRoots := startNode(t, testRepo(t, "noroots", bootstrapFrom(boot)), Options{})
	waitFor(t, 15*time.Second, "the provider's offer in both books", func() bool {
		return offeredGPUs(boot, prov) == 8 && offeredGPUs(noRoots, prov) == 8
	})
	o, _ := boot.market.Snapshot().Offer(prov.id, offer.ProviderOfferID)
	if len(o.AttestationHash) != 32 {
		t.Fatalf("the offer's attestation hash has %d bytes", len(o.AttestationHash))
	}
	const covered = "covered; its attestation hash matches the hardware"
	ctx := context.Background()
	res, err := boot.Attest(ctx, api.AttestRequest{Peer: prov.id.String()})
	if err != nil || !res.Verified || len(res.GPUs) != 8 || res.Offer != covered || res.CC != attest.CCAbsent || len(res.Changes) != 0 {
		t.Fatalf("attest: %+v, %v", res, err)
	}
	again, _ := boot.Attest(ctx, api.AttestRequest{Peer: prov.id.String()})
	if !again.Verified || len(again.Changes) != 0 {
		t.Errorf("second attestation: %+v", again)
	}

	// In CC mode every GPU's report, over the renter's nonce, verifies
	// against the configured root; a renter without one is told so.
	fake.EnableCC(ca.Evidence)
	cc, _ := boot.Attest(ctx, api.AttestRequest{Peer: prov.id.String()})
	if !cc.Verified || cc.CC != attest.CCVerified || cc.Offer != covered {
		t.Fatalf("CC attestation with the root: %+v", cc)
	}
	for _, g := range cc.GPUs {
		if g.CC != attest.CCVerified {
			t.Errorf("GPU %s: CC %q", g.UUID, g.CC)
		}
	}
	if cc, _ := noRoots.Attest(ctx, api.AttestRequest{Peer: prov.id.String()}); !cc.Verified || cc.CC != attest.CCNotVerified {
		t.Errorf("CC attestation without a root: %+v", cc)
	}
	// Evidence from another authority's certificates does not verify.
	fake.EnableCC(attesttest.NewCCAuthority(t).Evidence)
	if bad, _ := boot.Attest(ctx, api.AttestRequest{Peer: prov.id.String()}); !strings.HasPrefix(bad.CC, "invalid: "+attest.ErrCCChain.Error()) {
		t.Errorf("CC evidence under a foreign root: %q", bad.CC)
	}

	// Hardware that differs from what the offer's standing attestation
	// shows leaves the offer uncovered.
	inv, _ := fake.Inventory(ctx)
	fresh := attest.NewDocument(inv, prov.id, attest.Challenge{Challenger: boot.id, Nonce: make([]byte, attest.NonceSize)}, time.Now(), []string{offer.ProviderOfferID})
	fresh.Gpus[2].SerialHash = attest.SerialHash("a swapped board", prov.id)
	held, _ := boot.market.Snapshot().Offer(prov.id, offer.ProviderOfferID)
	if _, err := attest.CoverageOf(fresh, held, prov.provider.Standing(), prov.id); !errors.Is(err, attest.ErrDocChanged) {
		t.Errorf("swapped board: %v", err)
	}
	if _, err := attest.CoverageOf(fresh, held, []byte("not the document"), prov.id); !errors.Is(err, attest.ErrDocHash) {
		t.Errorf("wrong standing document: %v", err)
	}

	// A node that sells nothing it can attest refuses the challenge.
	plain, _ := prov.Attest(ctx, api.AttestRequest{Peer: boot.id.String()})
	if plain.Verified || plain.Reason == "" {
		t.Errorf("attesting a node without GPUs: %+v", plain)
	}
	if _, err := boot.Attest(ctx, api.AttestRequest{Peer: "nobody"}); err == nil {
		t.Error("a bad peer ID was accepted")
	}
}

func TestEvidenceExcludesAnOffenderAlsoAfterARestart(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), asProvider("A100", 4, 80, "1.00", "DE"))), Options{})
	renterRepo := testRepo(t, "renter", bootstrapFrom(boot))
	renter := startNode(t, renterRepo, Options{})
	waitFor(t, 15*time.Second, "the renter's book holds the offer", bookHolds(renter, 1))
	req := api.BidRequest{GPUs: []string{"A100"}, Count: 1, Hours: 1, Tier: "silver", MaxPrice: "2.00"}
	if res, _ := renter.Match(context.Background(), req); len(res.Candidates) != 1 {
		t.Fatalf("before evidence: %+v", res)
	}

	// The provider signed two documents seconds apart with different GPUs.
	doc := func(at time.Time, uuid string) []byte {
		d := attest.NewDocument(attest.Inventory{GPUs: []attest.GPU{{UUID: uuid}}}, prov.id, attest.Challenge{Challenger: boot.id, Nonce: make([]byte, attest.NonceSize)}, at, nil)
		env, err := attest.SignDocument(prov.key, d)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	now := time.Now()
	ev, _ := attest.NewEvidence(doc(now, "GPU-1"), doc(now.Add(2*time.Second), "GPU-2"))
	waitFor(t, 10*time.Second, "both other nodes in the bootstrap node's evidence mesh", func() bool { return len(boot.gossip.Mesh(p2p.TopicEvidence)) == 2 })
	if err := boot.link.Publish(context.Background(), p2p.TopicEvidence, ev); err != nil {
		t.Fatal(err)
	}
	excluded := func(n *Node) func() bool {
		return func() bool {
			res, _ := n.Match(context.Background(), req)
			return len(res.Candidates) == 0 && strings.Contains(res.Explanation, "excluded")
		}
	}
	waitFor(t, 10*time.Second, "the renter excludes the offender", excluded(renter))

	// A record an older release made on a UUID two peers named holds no
	// evidence: the restart forgives it (and the renter itself).
	legacy := ds.NewKey("/evidence/" + boot.id.String())
	if err := renter.store.Put(context.Background(), legacy, []byte{1}); err != nil {
		t.Fatal(err)
	}
	renter.Close()
	renter = startNode(t, renterRepo, Options{})
	waitFor(t, 15*time.Second, "the restarted renter's book holds the offer", bookHolds(renter, 1))
	if !excluded(renter)() {
		t.Error("a restart forgave the offender")
	}
	if renter.market.Excluded(boot.id) {
		t.Error("a record without evidence excludes its peer after a restart")
	}
	if ok, _ := renter.store.Has(context.Background(), legacy); ok {
		t.Error("a record without evidence was kept")
	}
}

// A full book keeps what the node vouches for (issue 11, attack 5: the
// book had no limit). A peer relays 40 valid offers of 40 fresh keys to a
// node whose book holds 16: it takes 16 and ignores the rest, and the
// offer of a provider it attested still gets in, displacing the newest
// of the strangers'. A connection alone is not trust (issue 26, attack
// 9): the provider is vouched for once attested, and its offer comes by
// the next sync.
func TestAFullBookKeepsWhatTheNodeVouchesFor(t *testing.T) {
	t.Parallel()
	log := keepLog(t)
	victim := startNode(t, testRepo(t, "victim", func(c *config.Config) { c.Gossip.BookOffers = 16 }), Options{Logger: log.node("victim")})
	relay := startNode(t, testRepo(t, "relay", bootstrapFrom(victim)), Options{Logger: log.node("relay")})
	waitFor(t, 15*time.Second, "the relay meshes with the victim", func() bool {
		return slices.Contains(relay.gossip.Mesh(p2p.TopicOffers), victim.id)
	})
	prov := config.DefaultConfig(config.ProfileProvider).Provider
	prov.GPUs = []config.GPUConfig{{Model: "A100", Count: 1, VRAMGiB: 80, ComputeCapability: "8.0"}}
	publishStrangers(t, relay, prov, 40)
	v := victim.market.Validator
	defer func() {
		if t.Failed() {
			t.Logf("the victim's validator: %d accepted, %d ignored, %d rejected; %d RPCs dropped for their sender's score",
				v.Accepted.Load(), v.Ignored.Load(), v.Rejected.Load(), victim.gossip.DroppedRPCs())
		}
	}()
	// Each offer is judged once by gossip; one may be judged again when
	// the victim's periodic book sync with the relay falls within the
	// burst, so the count may pass 40.
	waitFor(t, 15*time.Second, "the victim judges the 40 offers", func() bool {
		return v.Accepted.Load()+v.Ignored.Load() >= 40
	})
	if n := victim.market.Snapshot().Len(); n != 16 {
		t.Fatalf("the victim's book holds %d offers; its limit is 16", n)
	}
	fake, err := attest.NewFake("dgxh200")
	if err != nil {
		t.Fatal(err)
	}
	honest := startNode(t, testRepo(t, "honest", both(bootstrapFrom(victim), func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh200"
	})), Options{GPUSource: fake})
	ctx := context.Background()
	waitFor(t, 15*time.Second, "the victim attests the honest provider", func() bool {
		res, err := victim.Attest(ctx, api.AttestRequest{Peer: honest.id.String()})
		return err == nil && res.Verified
	})
	victim.market.FetchBook(ctx, honest.id)
	waitFor(t, 15*time.Second, "the honest provider's offer in the full book", func() bool { return offeredGPUs(victim, honest) == 8 })
	if n := victim.market.Snapshot().Len(); n != 16 {
		t.Errorf("the victim's book holds %d offers; its limit is 16", n)
	}
	if o, _ := victim.market.Book.Evicted(); o != 1 {
		t.Errorf("%d offers evicted; want 1", o)
	}
}

// Framing a provider does not work (issue 11, attack 1: an attacker had
// the provider sign a document for its own challenge, signed one with a
// throwaway key claiming one of its GPU UUIDs, and gossiped the pair:
// every node, and the victim itself, excluded the victim for good). Here
// the throwaway document even carries the victim's CC report: bound to
// the victim and the challenge, it proves nothing in another's document.
// The evidence is refused, nothing is recorded, and the victim stays
// matchable and rentable.
func TestFramingAProviderLeavesItRentable(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	ca := attesttest.NewCCAuthority(t)
	rootFile := filepath.Join(t.TempDir(), "nvidia-root.pem")
	if err := os.WriteFile(rootFile, ca.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	withRoots := func(c *config.Config) { c.Attest.CCRootCert = rootFile }
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	fake.EnableCC(ca.Evidence)
	boot := startNode(t, testRepo(t, "boot", withRoots), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), withRoots, func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.MinDuration = true, "fake:dgxh100", config.Dur(time.Minute)
	})), Options{GPUSource: fake})
	removeJobsOf(t, prov)
	renterRepo := testRepo(t, "renter", both(bootstrapFrom(boot), withRoots))
	renter := startNode(t, renterRepo, Options{})
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })

	// The attacker: a host whose gossip checks nothing it sends.
	ctx := context.Background()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	g, err := p2p.NewGossip(ctx, h, p2p.GossipConfig{Swarm: boot.Swarm(), OutboundQueue: 64, MaxMessageSize: 1 << 20, ValidatorTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: boot.id, Addrs: boot.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	h.Connect(ctx, peer.AddrInfo{ID: prov.id, Addrs: prov.host.Addrs()})
	waitFor(t, 15*time.Second, "the attacker knows the boot node's evidence subscription", func() bool {
		return slices.Contains(g.Topic(p2p.TopicEvidence).ListPeers(), boot.id)
	})
	a, err := p2p.Challenge(ctx, h, boot.Swarm(), prov.id)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := attest.VerifyDocument(a.Fresh, prov.id, attest.Challenge{Challenger: h.ID(), Nonce: a.Nonce}, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	throwaway, _, _ := crypto.GenerateEd25519Key(nil)
	throwawayID, _ := peer.IDFromPrivateKey(throwaway)
	claim := attest.NewDocument(attest.Inventory{GPUs: []attest.GPU{{UUID: victim.Gpus[0].Uuid, Name: victim.Gpus[0].Name}}}, throwawayID, attest.Challenge{Challenger: h.ID(), Nonce: a.Nonce}, time.Now(), nil)
	claim.Gpus[0].CcReport, claim.Gpus[0].CcCertChain = victim.Gpus[0].CcReport, victim.Gpus[0].CcCertChain
	claimEnv, err := attest.SignDocument(throwaway, claim)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := attest.NewEvidence(a.Fresh, claimEnv)
	v := boot.market.Validator
	judged := func() int64 { return v.Accepted.Load() + v.Rejected.Load() + v.Ignored.Load() }
	before, rejected := judged(), v.Rejected.Load()
	if err := g.Topic(p2p.TopicEvidence).Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the boot node judges the evidence", func() bool { return judged() > before })
	if v.Rejected.Load() != rejected+1 {
		t.Error("the boot node did not reject the framing evidence")
	}

	// A node never records itself, whatever it is handed.
	prov.market.RecordOffenders(ctx, []peer.ID{prov.id}, ev)
	for _, n := range []*Node{boot, prov, renter} {
		if n.market.Excluded(prov.id) {
			t.Errorf("node %s excludes the framed provider", n.id)
		}
	}
	res, err := renter.Rent(ctx, rentRequest(image, "true"), RentOutput{})
	if err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("renting from the framed provider: %v %+v", err, res.Receipt)
	}
	if res.Lease.Provider != prov.id.String() {
		t.Errorf("rented from %s", res.Lease.Provider)
	}
}

// publishStrangers publishes through n one offer of cfg's for each of n
// fresh keys, with no host behind any: what a key costs an attacker is
// nothing. It returns their peer IDs.
func publishStrangers(t *testing.T, via *Node, cfg config.ProviderConfig, n int) map[peer.ID]bool {
	t.Helper()
	ids := map[peer.ID]bool{}
	for range n {
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		o, err := offer.Build(cfg, id, 1, via.clock.Now()) // the node's time, fake or not
		if err != nil {
			t.Fatal(err)
		}
		env, err := market.Sign(key, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := via.link.Publish(context.Background(), p2p.TopicOffers, env); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	return ids
}
