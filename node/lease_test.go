package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	"google.golang.org/protobuf/proto"
)

// leaseSwarm starts a bootstrap node, a provider selling 8 fake H100s
// through a real Docker engine, and a light renter.
func leaseSwarm(t *testing.T, edit func(*Config)) (prov, renter *Node) {
	t.Helper()
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov = startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh100"
		c.Provider.Price = "2.00"
		c.Provider.Tiers = []string{"gold", "silver", "bronze"}
		c.Provider.MinDuration = Dur(time.Minute)
		c.Jobs.HeartbeatInterval = Dur(200 * time.Millisecond)
		c.Jobs.StopGrace = Dur(time.Second)
		c.Jobs.RenterGrace = Dur(2 * time.Second)
		if edit != nil {
			edit(c)
		}
	})), Options{GPUSource: fake})
	removeJobsOf(t, prov)
	renter = startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), Options{Light: true})
	return prov, renter
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
		if len(ls) != 1 || ls[0].State != LeaseCompleted {
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
	b, err := BuildBid(req.BidRequest, renter.id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	o, ok := renter.market.snapshot().Offer(prov.id, ProviderOfferID)
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
	req := &pb.LeaseRequest{Kind: &pb.LeaseRequest_Propose{Propose: cs}}
	reply, err := p2p.RequestLease(context.Background(), renter.host, prov.id, req)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func TestBadLeaseRequestsAreRefusedWithAReason(t *testing.T) {
	executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *Config) {
		c.Provider.ImageAllow = []string{"idlegrid-test/", "registry.example/"}
		c.Provider.MaxDuration = Dur(2 * time.Hour)
	})
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

// activeLease waits until n runs a lease in state active and returns it.
func activeLease(t *testing.T, n *Node) api.LeaseView {
	t.Helper()
	var found api.LeaseView
	waitFor(t, 20*time.Second, "a lease running on "+short(n.id), func() bool {
		ls, _ := n.Leases(context.Background())
		for _, l := range ls {
			if l.State == LeaseActive && l.Role == records.Provider {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func TestBronzeLeaseIsPreemptedByGoldWithNoticeAndPaysWhatRan(t *testing.T) {
	image := executortest.BusyboxImage(t)
	// The bronze job ignores SIGTERM, so it holds the GPUs through its
	// stop grace, past the gold lease's start.
	prov, renter := leaseSwarm(t, func(c *Config) { c.Provider.BronzeNotice, c.Jobs.StopGrace = Dur(time.Second), Dur(3*time.Second) })
	bronzeReq := rentRequest(image, "sh", "-c", `trap 'echo got TERM' TERM; echo bronze running; while true; do sleep 0.1; done`)
	bronzeReq.Tier, bronzeReq.Count = "bronze", 8
	var out, errs executortest.Buffer
	var notices []string
	var mu sync.Mutex
	bronze := rentAsync(context.Background(), renter, bronzeReq, RentOutput{Stdout: &out, Stderr: &errs, Progress: func(s string) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, s)
	}})
	out.WaitFor(t, "bronze running", 20*time.Second)
	activeLease(t, prov)

	goldReq := rentRequest(image, "echo", "gold ran")
	goldReq.Tier = "gold"
	var gold executortest.Buffer
	goldOut := &firstWrite{w: &gold}
	gres, err := renter.Rent(context.Background(), goldReq, RentOutput{Stdout: goldOut, Stderr: &gold})
	if err != nil {
		t.Fatalf("gold rent: %v; tried %+v", err, gres.Tried)
	}
	if gres.Receipt.Outcome != "completed" || gold.String() != "gold ran\n" {
		t.Errorf("gold: %+v, output %q", gres.Receipt, gold.String())
	}
	b := <-bronze
	if b.err != nil {
		t.Fatalf("bronze rent: %v", b.err)
	}
	rc := b.res.Receipt
	if rc.Outcome != "preempted" || len(rc.SignedBy) != 2 || !strings.Contains(out.String(), "got TERM") {
		t.Errorf("bronze receipt %+v, output %q", rc, out.String())
	}
	// The gold job ran only once the bronze one was off the GPUs.
	if bronzeEnd := time.UnixMilli(storedReceiptBody(t, prov, rc.LeaseID).EndUnixMs); !goldOut.at().After(bronzeEnd) {
		t.Errorf("the gold job printed at %s, before the bronze job was stopped at %s", goldOut.at().Format(time.StampMilli), bronzeEnd.Format(time.StampMilli))
	}
	// Pro-rated: it paid for the seconds it ran, not the hour it asked for.
	if rc.MeteredSeconds >= 60 || rc.Amount == "0.00" && rc.MeteredSeconds > 0 {
		t.Errorf("bronze metered %d s for %s", rc.MeteredSeconds, rc.Amount)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(notices, func(s string) bool {
		return strings.Contains(s, "preempted by a gold lease: the job will be stopped at")
	}) {
		t.Errorf("no preemption notice among %q", notices)
	}
}

// firstWrite passes writes to w and remembers when the first came.
type firstWrite struct {
	mu    sync.Mutex
	w     io.Writer
	first time.Time
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first.IsZero() {
		f.first = time.Now()
	}
	return f.w.Write(p)
}

func (f *firstWrite) at() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// storedReceiptBody opens the receipt a node stored for a lease.
func storedReceiptBody(t *testing.T, n *Node, id string) *pb.Receipt {
	t.Helper()
	rc, err := market.OpenCoSigned[*pb.Receipt](storedReceipt(t, n, id), market.Provider)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestProviderVanishingLeavesTheRenterPayingForVerifiedBeatsOnly(t *testing.T) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo up; sleep 30"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "up", 20*time.Second)
	l := activeLease(t, prov)
	waitFor(t, 10*time.Second, "a few verified beats", func() bool {
		rec, err := records.Store{D: renter.store}.Get(context.Background(), l.ID)
		return err == nil && rec.Beats >= 3
	})
	prov.host.Close() // the provider's machine drops off the network
	d := <-done
	if d.err != nil {
		t.Fatalf("rent: %v", d.err)
	}
	rc := d.res.Receipt
	if rc.Outcome != "failed" || !strings.Contains(rc.Note, "provider vanished") || len(rc.SignedBy) != 1 || rc.SignedBy[0] != "renter" || rc.Beats < 3 {
		t.Errorf("receipt %+v", rc)
	}
	// The renter pays from the lease's start to its last verified beat.
	if rc.MeteredSeconds > 5 {
		t.Errorf("metered %d s for a job the provider ran a few seconds", rc.MeteredSeconds)
	}
}

func TestRenterVanishingStopsTheJobAfterTheGracePeriod(t *testing.T) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	var out executortest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := rentAsync(ctx, renter, rentRequest(image, "sh", "-c", "echo up; sleep 300"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "up", 20*time.Second)
	l := activeLease(t, prov)
	renter.host.Close() // the renter's laptop drops off the network
	var rec *records.Lease
	waitFor(t, 20*time.Second, "the provider ends the lease", func() bool {
		rec, _ = records.Store{D: prov.store}.Get(context.Background(), l.ID)
		return rec != nil && LeaseEnded(rec.State)
	})
	if rec.State != LeaseCancelled || !strings.Contains(rec.Note, "the renter was gone for") {
		t.Errorf("lease ended %s: %s", rec.State, rec.Note)
	}
	rs, _ := prov.Receipts(context.Background())
	if len(rs) != 1 || len(rs[0].SignedBy) != 1 || rs[0].SignedBy[0] != "provider" {
		t.Errorf("receipts %+v", rs)
	}
	if ids, err := prov.leases.exec.Running(context.Background()); err != nil || len(ids) != 0 {
		t.Errorf("jobs still there after the renter left: %v %v", ids, err)
	}
	cancel()
	<-done
}

func TestTwoRentersRaceForOneProviderAndTheLoserMovesOn(t *testing.T) {
	image := executortest.BusyboxImage(t)
	cheap, renterA := leaseSwarm(t, func(c *Config) { c.Provider.Price = "1.00" })
	boot := cheap // a provider runs its DHT in server mode: a fine bootstrap peer
	dear := startNode(t, testRepo(t, "dear", both(bootstrapFrom(boot), func(c *Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxa100"
		c.Provider.Price = "2.00"
		c.Jobs.HeartbeatInterval = Dur(200 * time.Millisecond)
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
	ra, rb := <-a, <-b
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

// restartableProvider is a bootstrap node, a provider on a fixed port (a
// daemon restarts where it listened) selling a fake DGX H100 seeded by
// its peer ID, as a daemon's config makes it, and a light renter.
func restartableProvider(t *testing.T, renterGrace time.Duration) (provRepo *Repo, prov, renter *Node) {
	t.Helper()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	port := freePort(t)
	provRepo = testRepo(t, "prov", both(bootstrapFrom(boot), func(c *Config) {
		c.Network.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)}
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.MinDuration = true, "fake:dgxh100", Dur(time.Minute)
		c.Jobs.HeartbeatInterval, c.Jobs.StopGrace, c.Jobs.RenterGrace = Dur(200*time.Millisecond), Dur(time.Second), Dur(renterGrace)
	}))
	prov = startNode(t, provRepo, Options{})
	removeJobsOf(t, prov)
	renter = startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), Options{Light: true})
	return provRepo, prov, renter
}

// holds reports whether the provider's calendar holds lease id.
func holds(n *Node, id string) bool {
	found := false
	n.leases.do(context.Background(), func(st *leaseState) {
		for _, c := range st.cals {
			for _, a := range c.Allocations() {
				found = found || a.ID == id
			}
		}
	})
	return found
}

func TestProviderRestartAdoptsTheRunningJob(t *testing.T) {
	image := executortest.BusyboxImage(t)
	provRepo, prov, renter := restartableProvider(t, 5*time.Second)
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo before; sleep 6; echo after"), RentOutput{Stdout: &out, Stderr: &out, Progress: func(s string) { t.Log(s) }})
	out.WaitFor(t, "before", 20*time.Second)
	id := activeLease(t, prov).ID

	prov.Close() // the daemon stops (or is upgraded); its container runs on
	prov = startNode(t, provRepo, Options{})
	// The restarted provider finds the same GPUs and holds the lease's
	// slots again: they are not for sale until it ends.
	if !holds(prov, id) {
		t.Errorf("the restarted provider's calendar does not hold lease %s", id)
	}
	d := <-done
	if d.err != nil {
		t.Fatalf("rent across the provider's restart: %v", d.err)
	}
	rc := d.res.Receipt
	if rc.LeaseID != id || rc.Outcome != "completed" || rc.ExitCode != 0 || len(rc.SignedBy) != 2 || !strings.Contains(out.String(), "after") {
		t.Errorf("receipt %+v, output %q", rc, out.String())
	}
	if ls, _ := prov.Leases(context.Background()); len(ls) != 1 || ls[0].State != LeaseCompleted {
		t.Errorf("the restarted provider's leases: %+v", ls)
	}
}

// Both sides restart: the renter goes away while beats go on, and the
// provider comes back on other GPUs (its hardware changed), so the lease
// fails at once and its container is stopped. The restarted renter was
// sent none of the beats signed while it was away, yet it verifies the
// last one, replayed from the provider's store, and countersigns the
// receipt, which pays for every beat.
func TestRestartsOnBothSidesStillSettleOneReceipt(t *testing.T) {
	image := executortest.BusyboxImage(t)
	provRepo, prov, renter := restartableProvider(t, time.Minute)
	renterRepo := renter.repo
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo before; sleep 600"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "before", 20*time.Second)
	id := activeLease(t, prov).ID
	renter.Close()
	<-done
	offline, err := OpenRecords(renterRepo)
	if err != nil {
		t.Fatal(err)
	}
	seen, err := records.Store{D: offline.store}.Get(context.Background(), id)
	offline.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "beats the renter does not see", func() bool {
		rec, _ := records.Store{D: prov.store}.Get(context.Background(), id)
		return rec != nil && rec.Beats >= seen.Beats+3
	})

	prov.Close()
	other, err := attest.NewFake("dgxh100") // GPUs with other UUIDs
	if err != nil {
		t.Fatal(err)
	}
	prov = startNode(t, provRepo, Options{GPUSource: other})
	var ended *records.Lease
	waitFor(t, 20*time.Second, "the provider fails the lease", func() bool {
		ended, _ = records.Store{D: prov.store}.Get(context.Background(), id)
		return ended != nil && LeaseEnded(ended.State)
	})
	if ended.State != LeaseFailed || !strings.Contains(ended.Note, "not among this provider's") || holds(prov, id) {
		t.Errorf("lease on GPUs the provider no longer has: %s %q (held: %v)", ended.State, ended.Note, holds(prov, id))
	}
	waitFor(t, 20*time.Second, "the failed lease's container is removed", func() bool {
		running, err := prov.leases.exec.Running(context.Background())
		return err == nil && !slices.Contains(running, id)
	})

	renter = startNode(t, renterRepo, Options{Light: true})
	var rec *records.Lease
	waitFor(t, 30*time.Second, "the restarted renter settles the lease", func() bool {
		rec, _ = records.Store{D: renter.store}.Get(context.Background(), id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := renter.Receipts(context.Background())
	if rec.State != LeaseFailed || len(rs) != 1 || len(rs[0].SignedBy) != 2 || rec.Beats != ended.Beats || rec.Beats <= seen.Beats {
		t.Errorf("renter: lease %s, %d beats (provider %d, seen before the restart %d), receipts %+v", rec.State, rec.Beats, ended.Beats, seen.Beats, rs)
	}
	waitFor(t, 10*time.Second, "the provider stores the countersigned receipt", func() bool {
		return len(storedReceipt(t, prov, id).RenterSignature) > 0
	})
}

func TestRenterRestartFollowsItsLeaseToTheReceipt(t *testing.T) {
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	renterRepo := renter.repo
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo before; sleep 3; echo after"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "before", 20*time.Second)
	id := activeLease(t, prov).ID
	renter.Close() // the renter's laptop restarts
	if d := <-done; !errors.Is(d.err, ErrClosed) {
		t.Fatalf("rent on a closing node: %v", d.err)
	}
	renter = startNode(t, renterRepo, Options{Light: true})
	var rec *records.Lease
	waitFor(t, 20*time.Second, "the restarted renter settles the lease", func() bool {
		rec, _ = records.Store{D: renter.store}.Get(context.Background(), id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := renter.Receipts(context.Background())
	if rec.State != LeaseCompleted || len(rs) != 1 || len(rs[0].SignedBy) != 2 {
		t.Errorf("lease %s: %s, receipts %+v", id, rec.State, rs)
	}
	kept, _ := os.ReadFile(filepath.Join(renterRepo.Path, LogsDir, id+".stdout"))
	if !strings.Contains(string(kept), "after") {
		t.Errorf("kept output %q lacks what the job printed after the restart", kept)
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
	executortest.BusyboxImage(t)
	settled := &recordingSettlement{}
	fake, _ := attest.NewFake("dgxh100")
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	prov := startNode(t, testRepo(t, "prov", both(bootstrapFrom(boot), func(c *Config) {
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.MinDuration = true, "fake:dgxh100", Dur(time.Minute)
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
	if ls, _ := prov.Leases(context.Background()); len(ls) != 1 || ls[0].State != LeaseAccepted {
		t.Fatalf("provider's leases: %+v", ls)
	}

	// Withdrawn before its start: cancelled, nothing owed, nothing ran.
	reply, err := p2p.RequestLease(context.Background(), renter.host, prov.id, &pb.LeaseRequest{Kind: &pb.LeaseRequest_CancelLeaseId{CancelLeaseId: l.Id}})
	if err != nil || reply.Lease == nil {
		t.Fatalf("withdraw: %v %v", reply, err)
	}
	var rec *records.Lease
	waitFor(t, 10*time.Second, "the withdrawn lease ends", func() bool {
		rec, _ = records.Store{D: prov.store}.Get(context.Background(), l.Id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := prov.Receipts(context.Background())
	if rec.State != LeaseCancelled || rec.Job != "" || len(rs) != 1 || rs[0].Amount != "0.00" || rs[0].MeteredSeconds != 0 {
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
		out.WaitFor(t, "up", 20*time.Second)
		id := activeLease(t, prov).ID
		if _, err := side.n.CancelLease(ctx, id); err != nil {
			t.Fatalf("%s cancels: %v", side.name, err)
		}
		d := <-done
		if d.err != nil {
			t.Fatalf("rent cancelled by the %s: %v", side.name, d.err)
		}
		if rc := d.res.Receipt; rc.Outcome != LeaseCancelled || len(rc.SignedBy) != 2 || rc.Note != side.note {
			t.Errorf("cancelled by the %s: receipt %+v", side.name, rc)
		}
		if _, err := side.n.CancelLease(ctx, id); err == nil || !strings.Contains(err.Error(), "already ended") {
			t.Errorf("%s cancels an ended lease: %v", side.name, err)
		}
	}
}
