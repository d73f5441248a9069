package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	dockerimage "github.com/docker/docker/api/types/image"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// leaseSwarm starts a bootstrap node, a provider selling 8 fake H100s
// through a real Docker engine, and a light renter.
func leaseSwarm(t *testing.T, edit func(*config.Config)) (prov, renter *Node) {
	t.Helper()
	return leaseSwarmOn(t, nil, edit)
}

// leaseSwarmOn is leaseSwarm with every node on clk (nil: the system's).
func leaseSwarmOn(t *testing.T, clk clock.Clock, edit func(*config.Config)) (prov, renter *Node) {
	t.Helper()
	return leaseSwarmNet(t, loopback{}, clk, edit)
}

// leaseSwarmNet is leaseSwarmOn on net.
func leaseSwarmNet(t *testing.T, net testNet, clk clock.Clock, edit func(*config.Config)) (prov, renter *Node) {
	t.Helper()
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", nil), net.on(Options{Clock: clk}))
	prov = startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		sellsFakeH100s(c)
		c.Jobs.StopGrace = config.Dur(time.Second)
		c.Jobs.RenterGrace = config.Dur(2 * time.Second)
		if edit != nil {
			edit(c)
		}
	})), net.on(Options{GPUSource: fake, Clock: clk}))
	removeJobsOf(t, prov)
	renter = startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), net.on(Options{Light: true, Clock: clk}))
	return prov, renter
}

// sellsFakeH100s makes a provider of c: 8 fake H100s at 2.00, every
// tier, leases from a minute, a beat each 200 ms.
func sellsFakeH100s(c *config.Config) {
	c.Provider.Enabled = true
	c.Provider.GPUSource = "fake:dgxh100"
	c.Provider.Price = "2.00"
	c.Provider.Tiers = []string{"gold", "silver", "bronze"}
	c.Provider.MinDuration = config.Dur(time.Minute)
	c.Jobs.HeartbeatInterval = config.Dur(200 * time.Millisecond)
}

// removeJobsOf force-removes, when the test ends, every container the
// provider n left: a closed provider leaves its jobs for adoption.
func removeJobsOf(t testing.TB, n *Node) {
	cli := executortest.Docker(t)
	id := n.id.String()
	prefix := "/idlegrid-" + id[len(id)-12:]
	t.Cleanup(func() {
		n.Close()
		cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true})
		if err != nil {
			return
		}
		for _, c := range cs {
			if len(c.Names) > 0 && strings.HasPrefix(c.Names[0], prefix) {
				cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
			}
		}
	})
}

func rentRequest(image string, cmd ...string) api.RentRequest {
	return api.RentRequest{
		BidRequest: api.BidRequest{GPUs: []string{"H100"}, Count: 2, Hours: 1, Tier: "silver", MaxPrice: "2.50", Image: image},
		Command:    cmd, Env: []string{"GREETING=hello"}, GatherMillis: 15_000,
	}
}

// storedReceipt reads the receipt a node stored for a lease.
func storedReceipt(t *testing.T, n *Node, id string) *pb.CoSigned {
	t.Helper()
	rec, err := records.Store{D: n.store}.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("lease %s: %v", id, err)
	}
	cs := new(pb.CoSigned)
	if err := proto.Unmarshal(rec.Receipt, cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestRentRunsAContainerAndBothSidesSignOneReceipt(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	var stdout, stderr executortest.Buffer
	var progress []string
	res, err := renter.Rent(context.Background(), rentRequest(image, "sh", "-c", `echo "$GREETING from $IDLEGRID_LEASE"; echo oops >&2; sleep 1; exit 3`),
		RentOutput{Stdout: &stdout, Stderr: &stderr, Progress: func(s string) { progress = append(progress, s) }})
	if err != nil {
		t.Fatalf("rent: %v\n%s", err, strings.Join(progress, "\n"))
	}
	id := res.Lease.ID
	if got := stdout.String(); got != "hello from "+id+"\n" {
		t.Errorf("stdout %q", got)
	}
	if got := stderr.String(); got != "oops\n" {
		t.Errorf("stderr %q", got)
	}
	rc := res.Receipt
	if rc.Outcome != "completed" || rc.ExitCode != 3 || len(rc.SignedBy) != 2 || rc.Beats < 2 || rc.MeteredSeconds > 5 {
		t.Errorf("receipt %+v", rc)
	}
	// The provider stores the very receipt the renter stored, both
	// signatures on it.
	waitFor(t, 5*time.Second, "the provider holds the countersigned receipt", func() bool {
		return len(storedReceipt(t, prov, id).RenterSignature) > 0
	})
	if a, b := storedReceipt(t, prov, id), storedReceipt(t, renter, id); !proto.Equal(a, b) || !bytes.Equal(a.Body, b.Body) {
		t.Error("the two sides hold different receipts")
	}
	for _, n := range []*Node{prov, renter} {
		ls, _ := n.Leases(context.Background())
		if len(ls) != 1 || ls[0].State != views.LeaseCompleted {
			t.Errorf("leases: %+v", ls)
		}
		ledger, _ := n.Ledger(context.Background())
		if len(ledger) != 1 || ledger[0].Receipts != 1 {
			t.Errorf("ledger: %+v", ledger)
		}
	}
	if st := prov.Status().Leases; st.Ended != 1 || len(st.Active) != 0 || st.GPUsOffered != 8 || len(st.Earned) != 1 {
		t.Errorf("provider status: %+v", st)
	}
	if st := renter.Status().Leases; len(st.Spent) != 1 || st.Spent[0] != rc.Amount+" USD" {
		t.Errorf("renter status: %+v, receipt amount %s", st, rc.Amount)
	}
	if res.Timings.FirstOutput <= 0 || res.Timings.Attest <= 0 {
		t.Errorf("timings %+v", res.Timings)
	}
}

// proposeRaw signs a lease for 2 of prov's GPUs as the renter, edited by
// edit, and proposes it to prov.
func proposeRaw(t *testing.T, renter, prov *Node, edit func(*pb.Lease)) *pb.LeaseReply {
	t.Helper()
	return proposeCS(t, renter, prov, signedLease(t, renter, prov, edit))
}

// signedLease is a lease for 2 of prov's GPUs, edited, signed by renter.
func signedLease(t *testing.T, renter, prov *Node, edit func(*pb.Lease)) *pb.CoSigned {
	t.Helper()
	req := rentRequest(executortest.BusyboxImageName, "true")
	b, err := buildBid(req.BidRequest, renter.id, renter.swarm, time.Now(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := renter.market.Snapshot().Offer(prov.id, offer.ProviderOfferID)
	if !ok {
		t.Fatal("no offer in the renter's book")
	}
	l := &pb.Lease{
		Version: 1, Id: fmt.Sprintf("lease-raw-%d", time.Now().UnixNano()), Renter: []byte(renter.id), Provider: []byte(prov.id),
		OfferId: o.Header.Id, OfferSeq: o.Header.Seq, Bid: b, Tier: b.Tier, GpuCount: 2, StartUnixMs: time.Now().UnixMilli(),
		DurationSeconds: b.DurationSeconds, Currency: b.Currency, PriceMicros: 2_000_000,
		Workload: &pb.Workload{Image: b.Image, Command: []string{"true"}}, CreatedUnixMs: time.Now().UnixMilli(),
	}
	edit(l)
	cs, err := market.NewCoSigned(renter.key, market.Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// proposeCS sends a signed proposal, or a cancellation, to prov.
func proposeCS(t *testing.T, renter, prov *Node, cs *pb.CoSigned) *pb.LeaseReply {
	t.Helper()
	// Rent locates a provider before proposing; here the renter dials it
	// directly, as it may not have met it yet.
	if err := renter.host.Connect(context.Background(), peer.AddrInfo{ID: prov.id, Addrs: prov.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	req := &pb.LeaseRequest{Kind: &pb.LeaseRequest_Propose{Propose: cs}}
	reply, err := p2p.RequestLease(context.Background(), renter.host, renter.swarm, prov.id, req)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func TestBadLeaseRequestsAreRefusedWithAReason(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	// The provider refuses one image of the test's namespace; the engine
	// holds it under that name too, and its ID is that of the image.
	denied := "idlegrid-test/denied:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cli := executortest.Docker(t)
	if err := cli.ImageTag(context.Background(), image, denied); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.ImageRemove(context.Background(), denied, dockerimage.RemoveOptions{}) })
	img, err := cli.ImageInspect(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	prov, renter := leaseSwarm(t, func(c *config.Config) {
		c.Provider.ImageAllow = []string{"idlegrid-test/", "registry.example/", "nvcr.io/nvidia"}
		c.Provider.ImageDeny = []string{"idlegrid-test/denied"}
		c.Provider.MaxDuration = config.Dur(2 * time.Hour)
	})
	withImage := func(ref string) func(*pb.Lease) {
		return func(l *pb.Lease) { l.Bid.Image, l.Workload.Image = ref, ref }
	}
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	for _, c := range []struct {
		name string
		edit func(*pb.Lease)
		code pb.RejectCode
		want string
	}{
		{"unknown image", func(l *pb.Lease) {
			l.Bid.Image, l.Workload.Image = "idlegrid-test/nothing:9", "idlegrid-test/nothing:9"
		},
			pb.RejectCode_REJECT_IMAGE, "image idlegrid-test/nothing:9 is not present on this provider"},
		{"image outside the allow-list", func(l *pb.Lease) { l.Bid.Image, l.Workload.Image = "docker.io/miner:1", "docker.io/miner:1" },
			pb.RejectCode_REJECT_IMAGE, `image "docker.io/miner:1" is not allowed here`},
		// Issue 11, attack 9: the rules were prefixes of the raw name.
		{"a denied image by its full name", withImage("docker.io/" + denied), pb.RejectCode_REJECT_IMAGE, "is refused here"},
		{"a denied image by its ID", withImage(img.ID), pb.RejectCode_REJECT_IMAGE, "is refused here"},
		{"an allowed repository's lookalike", withImage("nvcr.io/nvidia-evil/x:1"), pb.RejectCode_REJECT_IMAGE, "is not allowed here"},
		{"price above the renter's cap", func(l *pb.Lease) { l.PriceMicros = l.Bid.MaxPriceMicros + 1 },
			pb.RejectCode_REJECT_BAD_REQUEST, "above the renter's cap"},
		{"price below the provider's", func(l *pb.Lease) { l.PriceMicros = 1_500_000 },
			pb.RejectCode_REJECT_PRICE, "price 1.50 below this provider's 2.00"},
		{"start in the past", func(l *pb.Lease) { l.StartUnixMs = time.Now().Add(-time.Hour).UnixMilli() },
			pb.RejectCode_REJECT_START, "is in the past"},
		{"duration beyond the offer's", func(l *pb.Lease) { l.DurationSeconds, l.Bid.DurationSeconds = 3*3600, 3*3600 },
			pb.RejectCode_REJECT_DURATION, "duration 3h0m0s outside this offer's 1m0s to 2h0m0s"},
		{"duration below the offer's", func(l *pb.Lease) { l.DurationSeconds, l.Bid.DurationSeconds = 30, 30 },
			pb.RejectCode_REJECT_DURATION, "outside this offer's"},
		{"a renter signing for another", func(l *pb.Lease) { l.Provider = l.Renter },
			pb.RejectCode_REJECT_BAD_REQUEST, "provider"},
		{"a lease ID a datastore key would collapse", func(l *pb.Lease) { l.Id = ".." },
			pb.RejectCode_REJECT_BAD_REQUEST, `id: ".."`},
	} {
		t.Run(c.name, func(t *testing.T) {
			reply := proposeRaw(t, renter, prov, c.edit)
			if reply.Lease != nil || reply.Code != c.code || !strings.Contains(reply.Reason, c.want) {
				t.Errorf("reply %v %q; want %v containing %q", reply.Code, reply.Reason, c.code, c.want)
			}
		})
	}
	if ls, _ := prov.Leases(context.Background()); len(ls) != 0 {
		t.Errorf("refused proposals left leases: %+v", ls)
	}
}

// Rent survives fake offers (issue 11, attack 2: 8 cheap H100 offers of
// 8 throwaway keys with no host behind them; rent tried 5, failed with
// "no provider took the lease" and never tried the honest provider). Rent
// gets past every fake within its try time to the honest provider, which
// it can reach, and runs; a later rental tries the honest provider first,
// the fakes that could not be reached ranking behind it.
func TestRentWalksPastFakeOffersToAnHonestProvider(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, _ := leaseSwarm(t, nil)
	cheap := config.DefaultConfig(config.ProfileProvider).Provider
	cheap.Price = "1.00"
	cheap.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	fakes := publishStrangers(t, prov, cheap, 8)
	waitFor(t, 10*time.Second, "the fakes in the provider's book", func() bool { return prov.market.Snapshot().Len() == 9 })
	renter := startNode(t, testRepo(t, "renter2", bootstrapFrom(prov)), Options{Light: true})
	waitFor(t, 15*time.Second, "the renter's book holds all 9 offers", func() bool { return renter.market.Snapshot().Len() == 9 })

	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if res.Lease.Provider != prov.id.String() || res.Receipt.Outcome != views.LeaseCompleted {
		t.Errorf("rented from %s: %s", res.Lease.Provider, res.Receipt.Outcome)
	}
	for _, a := range res.Tried {
		if id, _ := peer.Decode(a.Provider); !fakes[id] || a.Stage != string(stageLocate) {
			t.Errorf("attempt %+v: want a fake that could not be located", a)
		}
	}
	again, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil || again.Lease.Provider != prov.id.String() || len(again.Tried) != 0 {
		t.Errorf("a second rental tried %d before %s: %v", len(again.Tried), again.Lease.Provider, err)
	}
}

// A renter cannot hold a provider's calendar (issue 11, attack 7: two
// throwaway keys booked all 8 GPUs as gold, one lease 200 h ahead, and
// honest leases got NO_CAPACITY). A lease starts at most the offer's
// max_start_ahead ahead; one renter holds at most max_leases_per_renter
// open leases, and a receipt for GPU time it left unsigned counts as one.
func TestARenterCannotSquatTheCalendar(t *testing.T) {
	t.Parallel()
	executortest.BusyboxImage(t)
	prov, honest := leaseSwarm(t, func(c *config.Config) { c.Provider.RenterLeases = 2 })
	squatter := startNode(t, testRepo(t, "squatter", bootstrapFrom(prov)), Options{Light: true})
	taker := startNode(t, testRepo(t, "taker", bootstrapFrom(prov)), Options{Light: true})
	for _, n := range []*Node{honest, squatter, taker} {
		waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(n, prov) == 8 })
	}
	gold := func(gpus uint32, start time.Time) func(*pb.Lease) {
		return func(l *pb.Lease) {
			l.GpuCount, l.Bid.Gpu.Count, l.Tier, l.Bid.Tier = gpus, gpus, pb.Tier_TIER_GOLD, pb.Tier_TIER_GOLD
			l.StartUnixMs, l.Bid.LatestStartUnixMs = start.UnixMilli(), start.UnixMilli()
		}
	}
	if r := proposeRaw(t, squatter, prov, gold(8, time.Now().Add(200*time.Hour))); r.Lease != nil || r.Code != pb.RejectCode_REJECT_START || !strings.Contains(r.Reason, "more than 168h0m0s ahead") {
		t.Errorf("8 GPUs 200 h ahead: %v %q; want REJECT_START", r.Code, r.Reason)
	}
	var accepted int
	for range 4 {
		r := proposeRaw(t, squatter, prov, gold(1, time.Now().Add(30*time.Minute)))
		switch {
		case r.Lease != nil:
			accepted++
		case r.Code != pb.RejectCode_REJECT_RENTER_LIMIT || !strings.Contains(r.Reason, "holds 2 open leases here and left 0 receipts unsigned"):
			t.Errorf("the squatter's lease beyond its share: %v %q", r.Code, r.Reason)
		}
	}
	if accepted != 2 {
		t.Errorf("the squatter holds %d leases; the provider allows 2", accepted)
	}
	if r := proposeRaw(t, honest, prov, gold(2, time.Now())); r.Lease == nil {
		t.Errorf("an honest 1-hour lease: %v %q", r.Code, r.Reason)
	}

	// The taker runs a job and never attaches to countersign its receipt.
	cs := signedLease(t, taker, prov, func(l *pb.Lease) { l.Workload.Command = []string{"sleep", "2"} })
	l, _ := market.OpenCoSigned[*pb.Lease](cs, market.Renter)
	if r := proposeCS(t, taker, prov, cs); r.Lease == nil {
		t.Fatalf("the taker's lease: %v %q", r.Code, r.Reason)
	}
	waitFor(t, 20*time.Second, "the taker's lease ends", func() bool {
		rec, _ := records.Store{D: prov.store}.Get(context.Background(), l.Id)
		return rec != nil && LeaseEnded(rec.State)
	})
	if r := proposeRaw(t, taker, prov, gold(1, time.Now())); r.Lease == nil {
		t.Fatalf("the taker's second lease: %v %q", r.Code, r.Reason)
	}
	if r := proposeRaw(t, taker, prov, gold(1, time.Now())); r.Lease != nil || r.Code != pb.RejectCode_REJECT_RENTER_LIMIT || !strings.Contains(r.Reason, "holds 1 open leases here and left 1 receipts unsigned") {
		t.Errorf("the taker's third lease: %v %q; want REJECT_RENTER_LIMIT counting its unsigned receipt", r.Code, r.Reason)
	}
}

// A lease asks for no more CPU, memory and processes than the provider
// allows: what it asks beyond the provider's limits is cut to them
// (issue 11, attack 3: the lease's figures replaced the provider's, and
// a renter got pids.max 4,000,000 and a 1 TiB memory limit).
func TestALeaseGetsNoMoreThanTheProvidersLimits(t *testing.T) {
	t.Parallel()
	executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Jobs.MemoryGiB, c.Jobs.PIDs, c.Jobs.CPUs = 1, 64, 1 })
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	greedy := func(l *pb.Lease) {
		l.Workload.MemoryBytes, l.Workload.Pids, l.Workload.CpuMillis = 1<<40, 4_000_000, 1_000_000
		l.Workload.Command = []string{"sleep", "30"}
	}
	reply := proposeRaw(t, renter, prov, greedy)
	if reply.Lease == nil {
		t.Fatalf("refused: %v %s", reply.Code, reply.Reason)
	}
	l, _ := market.OpenCoSigned[*pb.Lease](reply.Lease)
	waitFor(t, 20*time.Second, "the lease's job runs", func() bool {
		rec, _ := prov.leaseStore().Get(context.Background(), l.Id)
		return rec != nil && rec.State == views.LeaseActive
	})
	name := "idlegrid-" + prov.id.String()[len(prov.id.String())-12:] + "-" + l.Id
	info, err := executortest.Docker(t).ContainerInspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	r := info.HostConfig.Resources
	if r.Memory != 1<<30 || r.PidsLimit == nil || *r.PidsLimit != 64 || r.NanoCPUs != 1e9 {
		t.Errorf("the container got memory %d, pids %v, nano-CPUs %d; the provider allows 1 GiB, 64, 1e9", r.Memory, r.PidsLimit, r.NanoCPUs)
	}
}

// firstOutputWait bounds a test's wait for a rental's first output: the
// gathering, attestation, negotiation and a container's start, which a
// loaded machine (a fresh clone's run beside stress-ng) can stretch far
// past the few seconds they take on an idle one. No test asserts how fast
// they are; the benchmarks and rent's own timings measure that.
const firstOutputWait = time.Minute

// rentAsync rents in the background; the result arrives on the channel.
type rentDone struct {
	res api.RentResult
	err error
}

func rentAsync(ctx context.Context, n *Node, req api.RentRequest, out RentOutput) chan rentDone {
	c := make(chan rentDone, 1)
	go func() {
		res, err := n.Rent(ctx, req, out)
		c <- rentDone{res, err}
	}()
	return c
}

// rentEndWait bounds how long a test waits for a rental to return once
// its lease was cancelled, its node closed or its job done: a rent that
// never returns is a failure that names itself, not a package's timeout.
const rentEndWait = 3 * time.Minute

// rentEnded waits for a rentAsync's result, failing the test past
// rentEndWait.
func rentEnded(t testing.TB, c <-chan rentDone) rentDone {
	t.Helper()
	select {
	case d := <-c:
		return d
	case <-time.After(rentEndWait):
		t.Fatalf("the rental did not return within %v", rentEndWait)
		return rentDone{}
	}
}

// activeLease waits until n runs a lease in state active and returns it.
func activeLease(t *testing.T, n *Node) api.LeaseView {
	t.Helper()
	var found api.LeaseView
	waitFor(t, 20*time.Second, "a lease running on "+short(n.id), func() bool {
		ls, _ := n.Leases(context.Background())
		for _, l := range ls {
			if l.State == views.LeaseActive && l.Role == records.Provider {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func TestTwoRentersRaceForOneProviderAndTheLoserMovesOn(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	cheap, renterA := leaseSwarm(t, func(c *config.Config) { c.Provider.Price = "1.00" })
	boot := cheap // a provider runs its DHT in server mode: a fine bootstrap peer
	dear := startNode(t, testRepo(t, "dear", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxa100"
		c.Provider.Price = "2.00"
		c.Jobs.HeartbeatInterval = config.Dur(200 * time.Millisecond)
	})), Options{})
	removeJobsOf(t, dear)
	renterB := startNode(t, testRepo(t, "renterB", bootstrapFrom(boot)), Options{Light: true})
	req := rentRequest(image, "sh", "-c", "echo ran; sleep 1")
	req.GPUs, req.Count = nil, 8
	for _, r := range []*Node{renterA, renterB} {
		waitFor(t, 15*time.Second, "both offers in every renter's book", func() bool { return offeredGPUs(r, cheap) == 8 && offeredGPUs(r, dear) == 8 })
	}
	var outA, outB executortest.Buffer
	a := rentAsync(context.Background(), renterA, req, RentOutput{Stdout: &outA, Stderr: &outA})
	b := rentAsync(context.Background(), renterB, req, RentOutput{Stdout: &outB, Stderr: &outB})
	ra, rb := rentEnded(t, a), rentEnded(t, b)
	if ra.err != nil || rb.err != nil {
		t.Fatalf("rents: %v (tried %+v), %v (tried %+v)", ra.err, ra.res.Tried, rb.err, rb.res.Tried)
	}
	providers := []string{ra.res.Lease.Provider, rb.res.Lease.Provider}
	if !slices.Contains(providers, cheap.id.String()) || !slices.Contains(providers, dear.id.String()) {
		t.Fatalf("leases went to %v", providers)
	}
	loser := ra.res
	if loser.Lease.Provider == cheap.id.String() {
		loser = rb.res
	}
	if len(loser.Tried) != 1 || loser.Tried[0].Stage != "negotiate" || !strings.Contains(loser.Tried[0].Reason, "REJECT_NO_CAPACITY") {
		t.Errorf("the loser tried %+v", loser.Tried)
	}
	for _, r := range []rentDone{ra, rb} {
		if r.res.Receipt.Outcome != "completed" || len(r.res.Receipt.SignedBy) != 2 {
			t.Errorf("receipt %+v", r.res.Receipt)
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// recordingSettlement settles nothing itself: it remembers the receipts.
type recordingSettlement struct {
	mu       sync.Mutex
	receipts []*pb.Receipt
}

func (r *recordingSettlement) Settle(_ context.Context, _ ds.Batch, _ string, rc *pb.Receipt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.receipts = append(r.receipts, rc)
	return nil
}

func TestProposalsAreIdempotentAndWithdrawableBeforeTheirStart(t *testing.T) {
	t.Parallel()
	executortest.BusyboxImage(t)
	settled := &recordingSettlement{}
	fake, _ := attest.NewFake("dgxh100")
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.MinDuration = true, "fake:dgxh100", config.Dur(time.Minute)
	})), Options{GPUSource: fake, Settlement: settled})
	removeJobsOf(t, prov)
	renter := startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), Options{Light: true})
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })

	// A lease that starts in a minute, proposed twice: one lease, the same
	// countersigned bytes both times.
	later := func(l *pb.Lease) {
		l.StartUnixMs = time.Now().Add(time.Minute).UnixMilli()
		l.Bid.LatestStartUnixMs = l.StartUnixMs
	}
	cs := signedLease(t, renter, prov, later)
	first, again := proposeCS(t, renter, prov, cs), proposeCS(t, renter, prov, cs)
	if first.Lease == nil || again.Lease == nil || !proto.Equal(first.Lease, again.Lease) {
		t.Fatalf("the same proposal twice: %v / %v", first, again)
	}
	l, _ := market.OpenCoSigned[*pb.Lease](first.Lease, market.Renter, market.Provider)
	other := signedLease(t, renter, prov, func(m *pb.Lease) { later(m); m.Id, m.PriceMicros = l.Id, 2_100_000 })
	if r := proposeCS(t, renter, prov, other); r.Lease != nil || r.Code != pb.RejectCode_REJECT_BAD_REQUEST || !strings.Contains(r.Reason, "already names other terms") {
		t.Errorf("other terms under a used ID: %v %q", r.Code, r.Reason)
	}
	if ls, _ := prov.Leases(context.Background()); len(ls) != 1 || ls[0].State != views.LeaseAccepted {
		t.Fatalf("provider's leases: %+v", ls)
	}

	// Withdrawn before its start: cancelled, nothing owed, nothing ran.
	reply, err := p2p.RequestLease(context.Background(), renter.host, renter.swarm, prov.id, &pb.LeaseRequest{Kind: &pb.LeaseRequest_CancelLeaseId{CancelLeaseId: l.Id}})
	if err != nil || reply.Lease == nil {
		t.Fatalf("withdraw: %v %v", reply, err)
	}
	var rec *records.Lease
	waitFor(t, 10*time.Second, "the withdrawn lease ends", func() bool {
		rec, _ = records.Store{D: prov.store}.Get(context.Background(), l.Id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := prov.Receipts(context.Background())
	if rec.State != views.LeaseCancelled || rec.Job != "" || len(rs) != 1 || rs[0].Amount != "0.00" || rs[0].MeteredSeconds != 0 {
		t.Errorf("withdrawn lease: %s, job %q, receipts %+v", rec.State, rec.Job, rs)
	}
	// Receipts go through the node's settlement.
	settled.mu.Lock()
	defer settled.mu.Unlock()
	if len(settled.receipts) != 1 || settled.receipts[0].LeaseId != l.Id {
		t.Errorf("settled %d receipts", len(settled.receipts))
	}
	if ledger, _ := prov.Ledger(context.Background()); len(ledger) != 0 {
		t.Errorf("the local ledger settled what another settlement took: %+v", ledger)
	}
}

// `idlegrid cancel` on either side: the provider stopping a lease of its
// own, the renter cancelling one it follows; each receipt is co-signed
// and says who cancelled. A lease that ended cannot be cancelled again.
func TestEitherSideCancelsALease(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	ctx := context.Background()
	for _, side := range []struct {
		name string
		n    *Node
		note string
	}{{"provider", prov, "cancelled by the provider"}, {"renter", renter, "cancelled by the renter"}} {
		var out executortest.Buffer
		done := rentAsync(ctx, renter, rentRequest(image, "sh", "-c", "echo up; sleep 300"), RentOutput{Stdout: &out, Stderr: &out})
		out.WaitFor(t, "up", firstOutputWait)
		id := activeLease(t, prov).ID
		if _, err := side.n.CancelLease(ctx, id); err != nil {
			t.Fatalf("%s cancels: %v", side.name, err)
		}
		d := rentEnded(t, done)
		if d.err != nil {
			t.Fatalf("rent cancelled by the %s: %v", side.name, d.err)
		}
		if rc := d.res.Receipt; rc.Outcome != views.LeaseCancelled || len(rc.SignedBy) != 2 || rc.Note != side.note {
			t.Errorf("cancelled by the %s: receipt %+v", side.name, rc)
		}
		if _, err := side.n.CancelLease(ctx, id); err == nil || !strings.Contains(err.Error(), "already ended") {
			t.Errorf("%s cancels an ended lease: %v", side.name, err)
		}
	}
}

// A renter cancelling a lease it left running (rent --detach) gets the
// receipt before the cancel returns, so its record says what the
// provider's does; and the receipt meters to the cancel, not through the
// stop grace a job that ignores SIGTERM takes to go.
func TestACancelEndsWithTheReceiptBothSidesHold(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	const grace = 3 * time.Second
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Jobs.StopGrace = config.Dur(grace) })
	ctx := context.Background()
	req := rentRequest(image, "sh", "-c", "trap '' TERM; echo up; while true; do sleep 1; done")
	req.Detach = true
	var out executortest.Buffer
	d := rentEnded(t, rentAsync(ctx, renter, req, RentOutput{Stdout: &out, Stderr: &out}))
	if d.err != nil || !d.res.Detached {
		t.Fatalf("rent --detach: %v, detached %v", d.err, d.res.Detached)
	}
	id := d.res.Lease.ID
	waitFor(t, 30*time.Second, "a verified beat at the provider", func() bool {
		rec, err := prov.leaseStore().Get(ctx, id)
		return err == nil && rec.State == records.Active && rec.LastEnv != nil
	})
	// The job ignores SIGTERM once its trap is set, which it says: a
	// cancel before that would end it at once, with no grace to bill. It
	// says it to its provider's executor: the renter, detached when the
	// job started, holds only what came before that.
	waitFor(t, 30*time.Second, "the job to say its trap is set", func() bool {
		var b bytes.Buffer
		_, err := prov.leases.Exec.Logs(ctx, id, executor.Offsets{}, executor.Offsets{Stdout: 1 << 20, Stderr: 1 << 20}, executor.Output{Stdout: &b, Stderr: io.Discard})
		return err == nil && strings.Contains(b.String(), "up")
	})
	l, err := renter.CancelLease(ctx, id)
	if err != nil || l.State != views.LeaseCancelled {
		t.Fatalf("the renter cancels its detached lease: %v, state %q; want it cancelled when the cancel returns", err, l.State)
	}
	// The renter has kept the receipt both signed; the provider keeps its
	// countersignature once the renter's reply reaches it.
	mine := storedReceipt(t, renter, id)
	waitFor(t, 10*time.Second, "the provider to keep the countersigned receipt", func() bool { return len(storedReceipt(t, prov, id).RenterSignature) > 0 })
	if theirs := storedReceipt(t, prov, id); !proto.Equal(mine, theirs) || len(mine.RenterSignature) == 0 || len(mine.ProviderSignature) == 0 {
		t.Fatalf("the two sides keep different receipts:\nrenter   %v\nprovider %v", mine, theirs)
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](mine, market.Renter, market.Provider)
	if err != nil {
		t.Fatal(err)
	}
	billed := time.Duration(rc.MeteredSeconds) * time.Second
	ran := time.UnixMilli(rc.EndUnixMs).Sub(time.UnixMilli(rc.StartUnixMs))
	if ran-billed < grace-time.Second {
		t.Errorf("metered %s of %s that ran, %s of it the stop grace: the grace was billed", billed, ran, grace)
	}
	if rc.Note != "cancelled by the renter" {
		t.Errorf("receipt note %q", rc.Note)
	}
}
