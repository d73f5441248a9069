package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/lease"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	ds "github.com/ipfs/go-datastore"
	"google.golang.org/protobuf/proto"
)

// The lease-timing tests run their swarm on one fake clock and jump over
// the waits they are about (a re-attach window, a renter's grace, a
// bronze lease's notice) once the event that starts the wait has been
// seen. Jobs that must outlive a restart wait for a signal the test sends
// once the restart is done, rather than sleeping through it.

// awaitJob is a job that prints before, then runs until it gets SIGUSR1,
// prints after and exits 0.
var awaitJob = []string{"sh", "-c", `trap 'echo after; exit 0' USR1; echo before; while true; do sleep 0.1; done`}

// signalJob sends sig to the container of lease id on provider n's engine.
func signalJob(t *testing.T, n *Node, id, sig string) {
	t.Helper()
	name := "idlegrid-" + n.id.String()[len(n.id.String())-12:] + "-" + id
	if err := executortest.Docker(t).ContainerKill(context.Background(), name, sig); err != nil {
		t.Fatalf("signal %s to lease %s: %v", sig, id, err)
	}
}

// detached reports whether provider n supervises lease id with no
// renter attached now; attached, whether it does with one attached.
func detached(n *Node, id string) bool { live, away := following(n, id); return live && away }

func attached(n *Node, id string) bool { live, away := following(n, id); return live && !away }

func following(n *Node, id string) (live, away bool) {
	n.leases.Do(context.Background(), func(st *lease.State) {
		if ll := st.Live[id]; ll != nil {
			live, away = true, ll.Feed.DetachedFor(n.clock.Now()) > 0
		}
	})
	return live, away
}

// watchFor returns a progress function that closes seen the first time
// a line starts with prefix, and records every line.
func watchFor(prefix string) (progress func(string), seen chan struct{}, lines func() []string) {
	var mu sync.Mutex
	var all []string
	seen = make(chan struct{})
	progress = func(s string) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, s)
		if strings.HasPrefix(s, prefix) && !slices.ContainsFunc(all[:len(all)-1], func(l string) bool { return strings.HasPrefix(l, prefix) }) {
			close(seen)
		}
	}
	return progress, seen, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(all)
	}
}

// await waits for c, failing the test after within.
func await[T any](t *testing.T, c <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(within):
		t.Fatalf("after %s: %s", within, what)
	}
	var zero T
	return zero
}

func TestBronzeLeaseIsPreemptedByGoldWithNoticeAndPaysWhatRan(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	// The bronze job ignores SIGTERM, so it holds the GPUs through its
	// stop grace, past the gold lease's start.
	notice := time.Second
	prov, renter := leaseSwarmOn(t, clk, func(c *config.Config) {
		c.Provider.BronzeNotice, c.Jobs.StopGrace = config.Dur(notice), config.Dur(3*time.Second)
	})
	bronzeReq := rentRequest(image, "sh", "-c", `trap 'echo got TERM' TERM; echo bronze running; while true; do sleep 0.1; done`)
	bronzeReq.Tier, bronzeReq.Count = "bronze", 8
	var out, errs executortest.Buffer
	const noticeLine = "provider: preempted by a gold lease: the job will be stopped at"
	progress, noticed, notices := watchFor(noticeLine)
	bronze := rentAsync(context.Background(), renter, bronzeReq, RentOutput{Stdout: &out, Stderr: &errs, Progress: progress})
	out.WaitFor(t, "bronze running", firstOutputWait)
	activeLease(t, prov)

	goldReq := rentRequest(image, "echo", "gold ran")
	goldReq.Tier = "gold"
	var gold executortest.Buffer
	goldOut := &firstWrite{w: &gold, clk: clk}
	goldDone := rentAsync(context.Background(), renter, goldReq, RentOutput{Stdout: goldOut, Stderr: &gold})
	await(t, noticed, 20*time.Second, "the bronze renter is told of the preemption")
	clk.Advance(notice + 2*time.Second) // the notice runs out, and the gold lease's start comes
	g := await(t, goldDone, time.Minute, "the gold rent ends")
	if g.err != nil {
		t.Fatalf("gold rent: %v; tried %+v", g.err, g.res.Tried)
	}
	if g.res.Receipt.Outcome != "completed" || gold.String() != "gold ran\n" {
		t.Errorf("gold: %+v, output %q", g.res.Receipt, gold.String())
	}
	b := await(t, bronze, time.Minute, "the bronze rent ends")
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
	if !slices.ContainsFunc(notices(), func(s string) bool { return strings.HasPrefix(s, noticeLine) }) {
		t.Errorf("no preemption notice among %q", notices())
	}
}

// firstWrite passes writes to w and remembers when the first came, on
// the swarm's clock: the one the provider's receipts are stamped by.
type firstWrite struct {
	mu    sync.Mutex
	w     io.Writer
	clk   clock.Clock
	first time.Time
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first.IsZero() {
		f.first = f.clk.Now()
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

// On loopback only: on mocknet the renter sometimes reached the dropped
// provider again and kept verifying its beats (2 of 6 local runs while
// the drop closed before it unlinked, 1 of 9 CI runs after), for a cause
// not yet found.
func TestProviderVanishingLeavesTheRenterPayingForVerifiedBeatsOnly(t *testing.T) {
	t.Parallel()
	testProviderVanishingLeavesTheRenterPayingForVerifiedBeatsOnly(t, loopback{})
}

func testProviderVanishingLeavesTheRenterPayingForVerifiedBeatsOnly(t *testing.T, net testNet) {
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	// TCP alone: a re-attach to a vanished QUIC address waits out QUIC's
	// handshake timeout, real time the fake clock cannot skip.
	prov, renter := leaseSwarmNet(t, net, clk, func(c *config.Config) { c.Network.Listen = []string{"/ip4/127.0.0.1/tcp/0"} })
	var out executortest.Buffer
	progress, lost, _ := watchFor("lost the job stream")
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo up; sleep 30"), RentOutput{Stdout: &out, Stderr: &out, Progress: progress})
	out.WaitFor(t, "up", firstOutputWait)
	l := activeLease(t, prov)
	waitFor(t, 10*time.Second, "a few verified beats", func() bool {
		clk.Advance(prov.cfg.Jobs.HeartbeatInterval.Std()) // a beat at each look, not each 200 ms
		rec, err := renter.leaseStore().Get(context.Background(), l.ID)
		return err == nil && rec.Beats >= 3
	})
	net.drop(prov) // the provider's machine drops off the network
	await(t, lost, 20*time.Second, "the renter notices its job stream is gone")
	clk.Advance(reattachFor + reattachEvery) // the re-attach window runs out
	d := await(t, done, 30*time.Second, "the rent ends")
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
	// The lease settles for settleFor, in case the provider comes back:
	// no record in the renter's chain yet, nothing in its ledger.
	if rec, err := renter.leaseStore().Get(context.Background(), d.res.Lease.ID); err != nil || rec.State != views.LeaseSettling || d.res.Lease.SettleBy.IsZero() {
		t.Errorf("the renter's lease after its provider vanished: %+v (%v), rent's view %+v", rec, err, d.res.Lease)
	}
	if raw, _ := renter.records.Range(context.Background(), 1, 10, ""); len(raw) != 0 {
		t.Errorf("the renter's chain holds %d records while the lease settles", len(raw))
	}
	clk.Advance(settleFor)
	waitFor(t, 30*time.Second, "the renter's own receipt stands once settleFor passed", func() bool {
		clk.Advance(settleEvery)
		rec, err := renter.leaseStore().Get(context.Background(), d.res.Lease.ID)
		return err == nil && rec.State == views.LeaseFailed
	})
	// And keeps the failure in its chain, half-signed: a proposal of its
	// own receipt that no agreement completes, which whoever reads the
	// renter's chain sees.
	if raw, err := renter.records.Range(context.Background(), 1, 10, ""); err != nil || len(raw) != 1 {
		t.Errorf("the renter's chain: %d records (%v)", len(raw), err)
	} else if b, _ := renter.records.Head(context.Background()); !b.Proposal() || b.Receipt().Outcome != pb.Outcome_OUTCOME_FAILED || b.Counterparty() != prov.id {
		t.Errorf("the renter's record: proposal %v, %v against %s", b.Proposal(), b.Receipt().Outcome, b.Counterparty())
	}
	// And counts it against the provider, on its own receipt: the provider
	// now ranks below one with no history (issue 12).
	waitFor(t, 10*time.Second, "the renter scores the vanished provider below the prior", func() bool {
		v, err := renter.Reputation(context.Background(), prov.id.String())
		return err == nil && v.Failures == 1 && v.Reliability < reputation.DefaultConfig().Prior
	})
	// So it ranks below a provider with no history at the same price.
	same := config.DefaultConfig(config.ProfileProvider).Provider
	same.Price, same.Tiers = prov.cfg.Provider.Price, prov.cfg.Provider.Tiers
	same.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	peerAtSamePrice := publishStrangers(t, renter, same, 1)
	waitFor(t, 10*time.Second, "the other provider's offer in the renter's book", func() bool {
		for p := range peerAtSamePrice {
			if _, ok := renter.market.Snapshot().Offer(p, offer.ProviderOfferID); ok {
				return true
			}
		}
		return false
	})
	// The renter's matcher weighs RTT too, and the other has none measured
	// (it has no host): rank them as its matcher would, RTT aside.
	b, err := buildBid(rentRequest(image, "true").BidRequest, renter.id, renter.swarm, clk.Now(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cands := market.NewMatcher(market.DefaultMatchConfig(), renter.reputation, market.UnknownRTTs{}).Match(renter.market.Snapshot(), b, clk.Now(), 10).Candidates
	if len(cands) != 2 || cands[0].PriceMicros != cands[1].PriceMicros || cands[1].Issuer != prov.id {
		t.Errorf("ranked %v; want the vanished provider last of two at the same price", cands)
	}
}

func TestRenterVanishingStopsTheJobAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	prov, renter := leaseSwarmOn(t, clk, nil)
	var out executortest.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := rentAsync(ctx, renter, rentRequest(image, "sh", "-c", "echo up; sleep 300"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "up", firstOutputWait)
	l := activeLease(t, prov)
	renter.host.Close() // the renter's laptop drops off the network
	waitFor(t, 20*time.Second, "the provider finds no renter on the job stream", func() bool { return detached(prov, l.ID) })
	clk.Advance(prov.cfg.Jobs.RenterGrace.Std() + prov.cfg.Jobs.HeartbeatInterval.Std()) // the grace runs out
	var rec *records.Lease
	waitFor(t, 20*time.Second, "the provider ends the lease", func() bool {
		rec, _ = prov.leaseStore().Get(context.Background(), l.ID)
		return rec != nil && LeaseEnded(rec.State)
	})
	if rec.State != views.LeaseCancelled || !strings.Contains(rec.Note, "the renter was gone for") {
		t.Errorf("lease ended %s: %s", rec.State, rec.Note)
	}
	rs, _ := prov.Receipts(context.Background())
	if len(rs) != 1 || len(rs[0].SignedBy) != 1 || rs[0].SignedBy[0] != "provider" {
		t.Errorf("receipts %+v", rs)
	}
	if ids, err := prov.leases.Exec.Running(context.Background()); err != nil || len(ids) != 0 {
		t.Errorf("jobs still there after the renter left: %v %v", ids, err)
	}
	// The cut-off renter gives up on its provider once its own re-attach
	// window runs out.
	cancel()
	for {
		select {
		case <-done:
			return
		case <-time.After(200 * time.Millisecond):
			clk.Advance(reattachFor)
		}
	}
}

// restartableProvider is a bootstrap node, a provider on a fixed port (a
// daemon restarts where it listened) selling a fake DGX H100 seeded by
// its peer ID, as a daemon's config makes it, and a light renter, all on
// clk.
func restartableProvider(t *testing.T, clk clock.Clock, renterGrace time.Duration) (provRepo *repo.Repo, prov, renter *Node) {
	t.Helper()
	boot := startNode(t, testRepo(t, "boot", nil), Options{Clock: clk})
	port := freePort(t)
	provRepo = testRepo(t, "prov", both(bootstrapFrom(boot), func(c *config.Config) {
		c.Network.Listen = []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)}
		c.Provider.Enabled, c.Provider.GPUSource, c.Provider.MinDuration = true, "fake:dgxh100", config.Dur(time.Minute)
		c.Jobs.HeartbeatInterval, c.Jobs.StopGrace, c.Jobs.RenterGrace = config.Dur(200*time.Millisecond), config.Dur(time.Second), config.Dur(renterGrace)
	}))
	prov = startNode(t, provRepo, Options{Clock: clk})
	removeJobsOf(t, prov)
	renter = startNode(t, testRepo(t, "renter", bootstrapFrom(boot)), Options{Light: true, Clock: clk})
	return provRepo, prov, renter
}

// holds reports whether the provider's calendar holds lease id.
func holds(n *Node, id string) bool {
	found := false
	n.leases.Do(context.Background(), func(st *lease.State) {
		for _, c := range st.Cals {
			for _, a := range c.Allocations() {
				found = found || a.ID == id
			}
		}
	})
	return found
}

func TestProviderRestartAdoptsTheRunningJob(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	provRepo, prov, renter := restartableProvider(t, nil, 5*time.Second)
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, awaitJob...), RentOutput{Stdout: &out, Stderr: &out, Progress: func(s string) { t.Log(s) }})
	out.WaitFor(t, "before", firstOutputWait)
	id := activeLease(t, prov).ID

	prov.Close() // the daemon stops (or is upgraded); its container runs on
	prov = startNode(t, provRepo, Options{})
	// The restarted provider finds the same GPUs and holds the lease's
	// slots again: they are not for sale until it ends.
	if !holds(prov, id) {
		t.Errorf("the restarted provider's calendar does not hold lease %s", id)
	}
	waitFor(t, 20*time.Second, "the renter follows the adopted job again", func() bool { return attached(prov, id) })
	signalJob(t, prov, id, "USR1") // the job finishes, under the restarted provider
	d := await(t, done, time.Minute, "the rent ends")
	if d.err != nil {
		t.Fatalf("rent across the provider's restart: %v", d.err)
	}
	rc := d.res.Receipt
	if rc.LeaseID != id || rc.Outcome != "completed" || rc.ExitCode != 0 || len(rc.SignedBy) != 2 || !strings.Contains(out.String(), "after") {
		t.Errorf("receipt %+v, output %q", rc, out.String())
	}
	if ls, _ := prov.Leases(context.Background()); len(ls) != 1 || ls[0].State != views.LeaseCompleted {
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
	t.Parallel()
	image := executortest.BusyboxImage(t)
	provRepo, prov, renter := restartableProvider(t, nil, time.Minute)
	renterRepo := renter.repo
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo before; sleep 600"), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "before", firstOutputWait)
	id := activeLease(t, prov).ID
	renter.Close()
	rentEnded(t, done)
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
		rec, _ := prov.leaseStore().Get(context.Background(), id)
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
		ended, _ = prov.leaseStore().Get(context.Background(), id)
		return ended != nil && LeaseEnded(ended.State)
	})
	if ended.State != views.LeaseFailed || !strings.Contains(ended.Note, "not among this provider's") || holds(prov, id) {
		t.Errorf("lease on GPUs the provider no longer has: %s %q (held: %v)", ended.State, ended.Note, holds(prov, id))
	}
	waitFor(t, 20*time.Second, "the failed lease's container is removed", func() bool {
		running, err := prov.leases.Exec.Running(context.Background())
		return err == nil && !slices.Contains(running, id)
	})

	renter = startNode(t, renterRepo, Options{Light: true})
	var rec *records.Lease
	waitFor(t, 30*time.Second, "the restarted renter settles the lease", func() bool {
		rec, _ = renter.leaseStore().Get(context.Background(), id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := renter.Receipts(context.Background())
	if rec.State != views.LeaseFailed || len(rs) != 1 || len(rs[0].SignedBy) != 2 || rec.Beats != ended.Beats || rec.Beats <= seen.Beats {
		t.Errorf("renter: lease %s, %d beats (provider %d, seen before the restart %d), receipts %+v", rec.State, rec.Beats, ended.Beats, seen.Beats, rs)
	}
	waitFor(t, 10*time.Second, "the provider stores the countersigned receipt", func() bool {
		return len(storedReceipt(t, prov, id).RenterSignature) > 0
	})
}

func TestRenterRestartFollowsItsLeaseToTheReceipt(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	// The provider waits for its renter as long as by default: the test
	// is of the restarted renter's follow, not of the grace (under -race
	// beside stress-ng a restart outlasted the swarm's 2 s, and the job
	// was stopped before the renter was back).
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Jobs.RenterGrace = config.Dur(30 * time.Second) })
	renterRepo := renter.repo
	var out executortest.Buffer
	done := rentAsync(context.Background(), renter, rentRequest(image, awaitJob...), RentOutput{Stdout: &out, Stderr: &out})
	out.WaitFor(t, "before", firstOutputWait)
	id := activeLease(t, prov).ID
	renter.Close() // the renter's laptop restarts
	if d := rentEnded(t, done); !errors.Is(d.err, ErrClosed) {
		t.Fatalf("rent on a closing node: %v", d.err)
	}
	waitFor(t, 10*time.Second, "the provider finds no renter on the job stream", func() bool { return detached(prov, id) })
	renter = startNode(t, renterRepo, Options{Light: true})
	waitFor(t, 20*time.Second, "the restarted renter follows its lease again", func() bool { return attached(prov, id) })
	signalJob(t, prov, id, "USR1") // the job finishes while the restarted renter follows it
	var rec *records.Lease
	waitFor(t, 20*time.Second, "the restarted renter settles the lease", func() bool {
		rec, _ = renter.leaseStore().Get(context.Background(), id)
		return rec != nil && LeaseEnded(rec.State)
	})
	rs, _ := renter.Receipts(context.Background())
	if rec.State != views.LeaseCompleted || len(rs) != 1 || len(rs[0].SignedBy) != 2 {
		t.Errorf("lease %s: %s, receipts %+v", id, rec.State, rs)
	}
	kept, _ := os.ReadFile(filepath.Join(renterRepo.Path, repo.LogsDir, id+".stdout"))
	if !strings.Contains(string(kept), "after") {
		t.Errorf("kept output %q lacks what the job printed after the restart", kept)
	}
}

// A provider outage longer than the re-attach window (its daemon down a
// while, its container running on): the renter gives the lease up and
// holds it settling, with a receipt of its own and no record yet. The
// provider comes back; the renter's settler reaches it, cancels the lease
// and countersigns the provider's receipt, which counts the beats signed
// while the renter was away (the last one, replayed, vouches for them).
// Both sides end with one receipt, the same, and one record: the
// provider's proposal, and the renter's agreement to it. So too when the
// provider's jobs.renter_grace cancels the lease before the renter comes
// (1 s: whichever is first; the renter then settles the ended lease).
func TestAProviderOutageEndsWithOneRecordBothSidesHold(t *testing.T) {
	t.Parallel()
	for _, grace := range []time.Duration{time.Hour, time.Second} {
		t.Run(fmt.Sprint("renter_grace=", grace), func(t *testing.T) {
			t.Parallel()
			testAProviderOutageEndsWithOneRecord(t, grace)
		})
	}
}

func testAProviderOutageEndsWithOneRecord(t *testing.T, renterGrace time.Duration) {
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	provRepo, prov, renter := restartableProvider(t, clk, renterGrace)
	var out executortest.Buffer
	progress, lost, _ := watchFor("lost the job stream")
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo up; sleep 600"), RentOutput{Stdout: &out, Stderr: &out, Progress: progress})
	out.WaitFor(t, "up", firstOutputWait)
	id := activeLease(t, prov).ID
	waitFor(t, 10*time.Second, "a few verified beats", func() bool {
		clk.Advance(prov.cfg.Jobs.HeartbeatInterval.Std())
		rec, err := renter.leaseStore().Get(context.Background(), id)
		return err == nil && rec.Beats >= 3
	})

	prov.Close() // the daemon goes down; the job runs on
	await(t, lost, 20*time.Second, "the renter notices its job stream is gone")
	clk.Advance(reattachFor + reattachEvery)
	d := await(t, done, 30*time.Second, "the rent ends")
	if d.err != nil || d.res.Lease.State != views.LeaseSettling || len(d.res.Receipt.SignedBy) != 1 {
		t.Fatalf("rent with the provider gone: %v, lease %s, receipt signed by %v", d.err, d.res.Lease.State, d.res.Receipt.SignedBy)
	}
	gone, _ := renter.leaseStore().Get(context.Background(), id)

	prov = startNode(t, provRepo, Options{Clock: clk})
	var rec *records.Lease
	// A settle period at a time, then real time for the exchange: the
	// provider waits receiptWait on the same clock for the countersigned
	// receipt.
	settled := func() bool {
		rec, _ = renter.leaseStore().Get(context.Background(), id)
		return rec != nil && LeaseEnded(rec.State)
	}
	for i := 0; !settled(); i++ {
		if i == 4 {
			t.Fatalf("the renter did not settle the lease with its provider, back, in %d settle periods: %s", i, rec.State)
		}
		clk.Advance(settleEvery)
		waitUntil(10*time.Second, settled)
	}
	if !waitUntil(10*time.Second, func() bool { return len(storedReceipt(t, prov, id).RenterSignature) > 0 }) {
		p, _ := prov.leaseStore().Get(context.Background(), id)
		t.Fatalf("the provider stores no countersigned receipt: renter's lease %s %q (%d beats), provider's %s %q (%d beats)", rec.State, rec.Note, rec.Beats, p.State, p.Note, p.Beats)
	}
	mine, theirs := storedReceipt(t, renter, id), storedReceipt(t, prov, id)
	if !proto.Equal(mine, theirs) || len(mine.ProviderSignature) == 0 || len(mine.RenterSignature) == 0 {
		t.Errorf("the two sides keep different receipts:\nrenter   %v\nprovider %v", mine, theirs)
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](mine, market.Renter, market.Provider)
	if err != nil || rc.Beats <= gone.Beats || rec.State != views.LeaseCancelled {
		t.Errorf("settled receipt: %v, %d beats (the renter had verified %d when it gave up), lease %s", err, rc.GetBeats(), gone.Beats, rec.State)
	}

	proposal, err := prov.records.Of(context.Background(), rc.LeaseHash)
	if err != nil {
		t.Fatalf("the provider's record of the lease: %v", err)
	}
	agreement, err := renter.records.Of(context.Background(), rc.LeaseHash)
	if err != nil {
		t.Fatalf("the renter's record of the lease: %v", err)
	}
	if !proposal.Proposal() || !chain.Completes(agreement, proposal) {
		t.Errorf("records: the provider's is a proposal %v, the renter's completes it %v", proposal.Proposal(), chain.Completes(agreement, proposal))
	}
	if raw, err := renter.records.Range(context.Background(), 1, 10, ""); err != nil || len(raw) != 1 {
		t.Errorf("the renter's chain holds %d records (%v), want the one agreement", len(raw), err)
	}
}

// A renter node that left a lease running (rent --detach) closes it with
// its provider once the provider has ended it, within a settle period and
// with nothing following it: the provider's receipt, countersigned, is
// then both sides'.
func TestARenterNodeClosesADetachedLeaseItsProviderEnded(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	prov, renter := leaseSwarmOn(t, clk, nil)
	req := rentRequest(image, "sh", "-c", "echo up; sleep 600")
	req.Detach = true
	var out executortest.Buffer
	d := await(t, rentAsync(context.Background(), renter, req, RentOutput{Stdout: &out, Stderr: &out}), 60*time.Second, "rent --detach returns")
	if d.err != nil || !d.res.Detached {
		t.Fatalf("rent --detach: %v, detached %v", d.err, d.res.Detached)
	}
	id := d.res.Lease.ID
	if _, err := prov.CancelLease(context.Background(), id); err != nil {
		t.Fatalf("the provider ends the lease: %v", err)
	}
	ended := func(n *Node) bool {
		rec, err := n.leaseStore().Get(context.Background(), id)
		return err == nil && LeaseEnded(rec.State)
	}
	// The provider waits receiptWait on the clock for a countersignature
	// nobody sends; the renter's settler comes round every settle period.
	for i := 0; !ended(renter); i++ {
		if i == 4 {
			t.Fatalf("the renter did not close the lease its provider ended (provider ended: %v) in %d settle periods", ended(prov), i)
		}
		clk.Advance(settleEvery)
		waitUntil(10*time.Second, func() bool { return ended(renter) })
	}
	if !waitUntil(10*time.Second, func() bool { return len(storedReceipt(t, prov, id).RenterSignature) > 0 }) {
		t.Fatal("the provider keeps no countersigned receipt")
	}
	if mine, theirs := storedReceipt(t, renter, id), storedReceipt(t, prov, id); !proto.Equal(mine, theirs) {
		t.Errorf("the two sides keep different receipts:\nrenter   %v\nprovider %v", mine, theirs)
	}
}

// A renter that countersigned a receipt and did not keep it (stopped
// between its reply and its store) gets it again, signed by both, when it
// attaches: the provider sends the receipt it keeps, not nothing, and the
// renter's record ends with it.
func TestARenterThatLostTheReceiptItSignedGetsItAgain(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	res, err := renter.Rent(context.Background(), rentRequest(image, "echo", "done"), RentOutput{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	id := res.Lease.ID
	if !waitUntil(10*time.Second, func() bool { return len(storedReceipt(t, prov, id).RenterSignature) > 0 }) {
		t.Fatal("the provider keeps no countersigned receipt")
	}
	want := storedReceipt(t, renter, id)
	// The renter's record as a renter stopped before its store left it,
	// written straight to its datastore.
	rec, err := renter.leaseStore().Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Receipt, rec.Note = records.Active, nil, ""
	raw, _ := json.Marshal(rec)
	if err := renter.store.Put(context.Background(), ds.NewKey("/leases").ChildString(market.KeyPart(id)), raw); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := renter.Attach(ctx, id, RentOutput{Stdout: io.Discard, Stderr: io.Discard}); err != nil || ctx.Err() != nil {
		t.Fatalf("attach to the lease whose receipt both signed: %v (%v)", err, ctx.Err())
	}
	got, err := renter.leaseStore().Get(context.Background(), id)
	if err != nil || !LeaseEnded(got.State) {
		t.Fatalf("the renter's record after the attach: %+v, %v; want it ended", got, err)
	}
	if mine := storedReceipt(t, renter, id); !proto.Equal(mine, want) {
		t.Errorf("the renter keeps another receipt:\nnow    %v\nbefore %v", mine, want)
	}
}
