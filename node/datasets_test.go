package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/ipfs/go-cid"
)

// datasetDir writes a folder of random files, one in a subfolder, and a
// SUMS file that sha256sum -c checks them by.
func datasetDir(t *testing.T, sizes ...int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "set")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	for i, n := range sizes {
		name := fmt.Sprintf("part%d.bin", i)
		if i%2 == 1 {
			name = "sub/" + name
		}
		b := make([]byte, n)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(b), name)
	}
	if err := os.WriteFile(filepath.Join(dir, "SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestARentalsDatasetIsStagedAndItsJobReadsItReadOnly(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		prov, renter := leaseSwarm(t, func(c *config.Config) { c.Network.Listen = []string{listenOn(t, transport)} })
		ctx := context.Background()
		d, err := renter.AddDataset(ctx, api.DatasetAdd{Path: datasetDir(t, 3<<20+17, 1<<20, 4096)})
		if err != nil {
			t.Fatal(err)
		}
		req := rentRequest(image, "sh", "-c", "cd /data && sha256sum -c SUMS && if touch /data/x 2>/dev/null; then echo WRITABLE; fi; echo read-all")
		req.Datasets = []api.DatasetMount{{CID: d.CID, Path: "/data"}}
		var out bytes.Buffer // read once Rent returned
		var progress []string
		res, err := renter.Rent(ctx, req, RentOutput{Stdout: &out, Stderr: &out, Progress: func(s string) { progress = append(progress, s) }})
		if err != nil {
			t.Fatalf("rent: %v\n%s", err, strings.Join(progress, "\n"))
		}
		if res.Receipt.Outcome != views.LeaseCompleted {
			t.Fatalf("outcome %s (%s)\n%s", res.Receipt.Outcome, res.Receipt.Note, out.String())
		}
		for _, want := range []string{"part0.bin: OK", "sub/part1.bin: OK", "part2.bin: OK", "read-all"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the job's output lacks %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "WRITABLE") {
			t.Error("the job could write in its dataset")
		}
		// The provider keeps it, cached, and its copy for the job is gone.
		kept, err := prov.datasetAPI.data.Get(ctx, cid.MustParse(d.CID))
		if err != nil || kept.Bytes != d.Bytes || kept.Pinned {
			t.Fatalf("the provider keeps %+v (%v); want the renter's %d bytes, cached", kept, err, d.Bytes)
		}
		mounts, _ := os.ReadDir(filepath.Join(prov.repo.Path, repo.MountsDir))
		if len(mounts) != 0 {
			t.Errorf("the provider's mounts folder holds %d entries after the lease", len(mounts))
		}
		// ...and the swarm knows it holds it.
		waitFor(t, 20*time.Second, "the swarm's DHT to name the provider a holder", func() bool {
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ps, _ := renter.disc.DHT().FindProviders(fctx, cid.MustParse(d.CID))
			for _, p := range ps {
				if p.ID == prov.id {
					return true
				}
			}
			return false
		})
	})
}

func TestARentalNamesOnlyDatasetsItsNodeKeeps(t *testing.T) {
	t.Parallel()
	renter := startNode(t, testRepo(t, "renter", nil), Options{Light: true})
	// The exchange speaks the protocol the resource manager bounds.
	if !slices.Contains(renter.host.Mux().Protocols(), renter.swarm.ExchangeProtocol()) {
		t.Fatalf("the host serves %v, not the exchange's %s", renter.host.Mux().Protocols(), renter.swarm.ExchangeProtocol())
	}
	req := rentRequest("busybox", "true")
	req.Datasets = []api.DatasetMount{{CID: "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy", Path: "/data"}}
	_, err := renter.Rent(context.Background(), req, RentOutput{})
	if !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "datasets[0].cid") || !strings.Contains(err.Error(), "dataset add") {
		t.Fatalf("renting with a dataset not kept: %v; want an invalid datasets[0].cid that says to add it", err)
	}
}

func TestTheMatcherPrefersTheProviderThatKeepsTheData(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	slow := func(c *config.Config) { c.Provider.Host.DownMbps = 1 } // staging 4 MB takes 32 s
	holder, renter := leaseSwarm(t, slow)
	ctx := context.Background()
	d, err := renter.AddDataset(ctx, api.DatasetAdd{Path: datasetDir(t, 3<<20+17, 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	// The first lease stages it at the one provider there is.
	req := rentRequest(image, "sh", "-c", "cd /data && sha256sum -c SUMS")
	req.Datasets = []api.DatasetMount{{CID: d.CID, Path: "/data"}}
	if res, err := renter.Rent(ctx, req, RentOutput{}); err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("the first rental: %v %+v", err, res.Receipt)
	}
	// A second provider at the same price, keeping nothing.
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	other := startNode(t, testRepo(t, "other", both(bootstrapFrom(holder), sellsFakeH100s, slow)), Options{GPUSource: fake})
	removeJobsOf(t, other)
	// The holder's offer lists the dataset once it keeps it; offers
	// --dataset finds it, and only it.
	waitFor(t, time.Minute, "the renter's book to hold both offers, the holder's listing the dataset", func() bool {
		os, err := renter.Offers(api.OfferQuery{Dataset: d.CID})
		all, _ := renter.Offers(api.OfferQuery{})
		return err == nil && len(os) == 1 && os[0].Provider == holder.id.String() && len(all) == 2
	})
	bid := req.BidRequest
	bid.Datasets = []string{d.CID}
	res, err := renter.Match(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Candidates) != 2 || res.Candidates[0].Offer.Provider != holder.id.String() {
		t.Fatalf("candidates %+v; want the holder first of two", res.Candidates)
	}
	if got := res.Candidates[0].Staging; !strings.HasPrefix(got, "holds all") {
		t.Errorf("the holder's staging: %q", got)
	}
	want := fmt.Sprintf("stages %.3g MB in ~%.0fs", float64(d.Bytes)/1e6, math.Ceil(float64(d.Bytes)*8/1e6))
	if got := res.Candidates[1].Staging; !strings.Contains(got, want) {
		t.Errorf("the other's staging: %q, want %q", got, want)
	}
	// rent ranks alike: the lease goes to the holder.
	var out bytes.Buffer
	res2, err := renter.Rent(ctx, req, RentOutput{Stdout: &out})
	if err != nil || res2.Lease.Provider != holder.id.String() {
		t.Fatalf("the second rental went to %s (%v); want the holder %s", res2.Lease.Provider, err, holder.id)
	}
	if !strings.Contains(out.String(), "part0.bin: OK") {
		t.Errorf("the job's output: %s", out.String())
	}
}

// On mocknet with the PlanetLab latencies, three providers at one price:
// the first lease stages the dataset from the renter; while it runs, a
// second lease at another provider stages it from the renter and the
// first provider at once, whose offer says it keeps it; a third goes to
// the second provider, which keeps it, rather than to the third, which
// would stage it, whatever their RTTs. Every job checks every file's
// SHA-256. The dataset is 1 GiB (some 100 s on two idle cores), 64 MiB
// under the race detector, whose pass looks for races, not for what a
// size does; IDLEGRID_TEST_DATASET_MIB sets another size, 15 for a quick
// run.
func TestLeasesStageFromEveryHolderAndGoWhereTheDataIs(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	net := newMockSwarm(t)
	slow := func(c *config.Config) { c.Provider.Host.DownMbps = 1 } // what they declare
	p1, renter := leaseSwarmNet(t, net, nil, slow)
	provs := []*Node{p1}
	for _, name := range []string{"p2", "p3"} {
		fake, err := attest.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		p := startNode(t, testRepo(t, name, both(bootstrapFrom(p1), sellsFakeH100s, slow)), net.on(Options{GPUSource: fake}))
		removeJobsOf(t, p)
		provs = append(provs, p)
	}
	byID := func(id string) *Node {
		i := slices.IndexFunc(provs, func(n *Node) bool { return n.id.String() == id })
		if i < 0 {
			t.Fatalf("a lease went to %s, no provider of the test", id)
		}
		return provs[i]
	}
	mib := 1024
	if raceDetector {
		mib = 64
	}
	if s := os.Getenv("IDLEGRID_TEST_DATASET_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil || mib < 3 {
			t.Fatalf("IDLEGRID_TEST_DATASET_MIB %q: want 3 or more", s)
		}
	}
	sizes := []int{mib << 20 / 2, mib<<20/3 + 3, mib << 20 / 6}
	ctx := context.Background()
	d, err := renter.AddDataset(ctx, api.DatasetAdd{Path: datasetDir(t, sizes...)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the renter's book to hold the three providers' offers", func() bool {
		os, _ := renter.Offers(api.OfferQuery{})
		return len(os) == 3
	})
	check := "cd /data && sha256sum -c SUMS && echo verified"
	req := rentRequest(image, "sh", "-c", check+" && sleep 600")
	req.Count, req.Detach = 8, true // all of a provider's GPUs, till cancelled
	req.Datasets = []api.DatasetMount{{CID: d.CID, Path: "/data"}}
	first, err := renter.Rent(ctx, req, RentOutput{})
	if err != nil {
		t.Fatal(err)
	}
	holder := byID(first.Lease.Provider)
	t.Cleanup(func() { renter.CancelLease(context.Background(), first.Lease.ID) })
	for _, p := range provs {
		if p != holder {
			waitFor(t, time.Minute, "every other provider's book to say the first keeps the dataset", func() bool {
				return slices.Contains(p.bookHolders(d.CID), holder.id)
			})
		}
	}
	// The second lease: the holder is busy, so another stages it, from
	// the renter and the holder at once.
	var progress []string
	req.Detach, req.Command = false, []string{"sh", "-c", check}
	rent := func() api.RentResult {
		t.Helper()
		progress = nil
		var out bytes.Buffer
		res, err := renter.Rent(ctx, req, RentOutput{Stdout: &out, Progress: func(s string) { progress = append(progress, s) }})
		if err != nil {
			t.Fatalf("rent: %v\n%s", err, strings.Join(progress, "\n"))
		}
		if res.Receipt.Outcome != views.LeaseCompleted || !strings.Contains(out.String(), "verified") {
			t.Fatalf("the lease at %s: %s (%s)\n%s", res.Lease.Provider, res.Receipt.Outcome, res.Receipt.Note, out.String())
		}
		return res
	}
	staging := func() string {
		i := slices.IndexFunc(progress, func(s string) bool { return strings.Contains(s, "staged at /data") })
		if i < 0 {
			t.Fatalf("no staging said:\n%s", strings.Join(progress, "\n"))
		}
		return progress[i]
	}
	second := byID(rent().Lease.Provider)
	if second == holder {
		t.Fatal("the second lease went to the busy holder")
	}
	if s := staging(); !strings.Contains(s, "from 2 holders") {
		t.Errorf("the second staging: %q; want it from 2 holders", s)
	}
	third := provs[slices.IndexFunc(provs, func(n *Node) bool { return n != holder && n != second })]
	waitFor(t, time.Minute, "the renter's book to say the second keeps the dataset", func() bool {
		os, _ := renter.Offers(api.OfferQuery{Dataset: d.CID})
		return len(os) == 2
	})
	// A lease a third of the time the third would take to stage the
	// dataset at the 1 Mbit/s it declares (a minute at least): staging
	// costs it three times the lease, more than any RTT.
	req.Hours = max(1.0/60, float64(d.Bytes)*8/1e6/3/3600)
	bid := req.BidRequest
	bid.Datasets = []string{d.CID}
	m, err := renter.Match(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	rank := func(p *Node) int {
		return slices.IndexFunc(m.Candidates, func(c api.CandidateView) bool { return c.Offer.Provider == p.id.String() })
	}
	if r2, r3 := rank(second), rank(third); r2 < 0 || r3 < 0 || r2 > r3 {
		t.Fatalf("ranks: the second (a holder) %d, the third %d; want the holder first\n%+v", r2, r3, m.Candidates)
	}
	if got := byID(rent().Lease.Provider); got != second {
		t.Fatalf("the third lease went to %s; want the second provider, which keeps the dataset", got.id)
	}
	if s := staging(); !strings.Contains(s, "kept here already") {
		t.Errorf("the third staging: %q; want the dataset kept already", s)
	}
}

func TestAnEncryptedDatasetIsReadOnlyInTheJobsMemory(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		prov, renter := leaseSwarm(t, func(c *config.Config) { c.Network.Listen = []string{listenOn(t, transport)} })
		ctx := context.Background()
		dir := datasetDir(t, 2<<20+5, 1<<20)
		marker := bytes.Repeat([]byte("PLAINTEXT-MARKER "), 64)
		if err := os.WriteFile(filepath.Join(dir, "secret.txt"), marker, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := renter.AddDataset(ctx, api.DatasetAdd{Path: dir, Encrypt: true})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Encrypted {
			t.Fatalf("added %+v; want it encrypted", d)
		}
		req := rentRequest(image, "sh", "-c", "cd /data && sha256sum -c SUMS && grep -c PLAINTEXT-MARKER secret.txt && if touch /data/x 2>/dev/null; then echo WRITABLE; fi; echo read-all")
		req.Datasets = []api.DatasetMount{{CID: d.CID, Path: "/data"}}
		var out bytes.Buffer
		res, err := renter.Rent(ctx, req, RentOutput{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Receipt.Outcome != views.LeaseCompleted {
			t.Fatalf("outcome %s (%s)\n%s", res.Receipt.Outcome, res.Receipt.Note, out.String())
		}
		for _, want := range []string{"part0.bin: OK", "sub/part1.bin: OK", "read-all"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the job's output lacks %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "WRITABLE") {
			t.Error("the job could write in its dataset")
		}
		// The provider keeps ciphertext only: no block, and no file of its
		// repository, holds the plaintext or the key.
		kept, _ := renter.datasetAPI.data.Get(ctx, cid.MustParse(d.CID))
		keys, err := prov.datasetAPI.data.Blockstore().AllKeysChan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		blocks := 0
		for k := range keys {
			b, err := prov.datasetAPI.data.Blockstore().Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			blocks++
			if bytes.Contains(b.RawData(), []byte("PLAINTEXT-MARKER")) {
				t.Fatalf("the provider's block %s holds plaintext", k)
			}
		}
		if blocks == 0 {
			t.Fatal("the provider keeps no block of the dataset")
		}
		filepath.WalkDir(prov.repo.Path, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte("PLAINTEXT-MARKER")) || bytes.Contains(b, []byte(kept.Key)) {
				t.Errorf("%s holds the plaintext or the dataset's key", p)
			}
			return nil
		})
		// The job's memory went with its container.
		cs, err := executortest.Docker(t).ContainerList(ctx, container.ListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if len(c.Names) > 0 && strings.Contains(c.Names[0], res.Lease.ID) {
				t.Errorf("the lease's container %s is still there", c.Names[0])
			}
		}
	})
}
