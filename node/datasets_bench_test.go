package node

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/data"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/ipfs/go-cid"
)

// BenchmarkLeaseStartWithDataset is a lease's time from acceptance to its
// job's first output with a dataset its provider keeps already (held)
// and with one it stages from the renter first (staged), on loopback:
// ms of each, and staged/held. The dataset is IDLEGRID_BENCH_DATASET_MIB
// (256 MiB unless set) of random bytes.
//
//	IDLEGRID_BENCH_DATASET_MIB=1024 go test ./node -run '^$' -bench LeaseStartWithDataset -benchtime 3x
func BenchmarkLeaseStartWithDataset(b *testing.B) {
	size := 256 << 20
	if s := os.Getenv("IDLEGRID_BENCH_DATASET_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("IDLEGRID_BENCH_DATASET_MIB %q: want a number of MiB", s)
		}
		size = n << 20
	}
	image := executortest.BusyboxImage(b)
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		b.Fatal(err)
	}
	boot := startNode(b, testRepo(b, "boot", nil), Options{})
	prov := startNode(b, testRepo(b, "prov", both(bootstrapFrom(boot), sellsFakeH100s)), Options{GPUSource: fake})
	removeJobsOf(b, prov)
	renter := startNode(b, testRepo(b, "renter", bootstrapFrom(boot)), Options{Light: true})
	dir := filepath.Join(b.TempDir(), "set")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	raw := make([]byte, size)
	rand.Read(raw)
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	d, err := renter.AddDataset(ctx, api.DatasetAdd{Path: dir})
	if err != nil {
		b.Fatal(err)
	}
	req := rentRequest(image, "echo", "first")
	req.Datasets = []api.DatasetMount{{CID: d.CID, Path: "/data"}}
	rent := func() time.Duration {
		res, err := renter.Rent(ctx, req, RentOutput{})
		if err != nil || res.Timings.Start == 0 {
			b.Fatalf("rent: %v %+v", err, res.Receipt)
		}
		return res.Timings.Start
	}
	var staged, held time.Duration
	for b.Loop() {
		if _, err := prov.datasetAPI.data.Remove(ctx, cid.MustParse(d.CID)); err != nil && !errors.Is(err, data.ErrNotFound) {
			b.Fatalf("the provider let go of the dataset: %v", err)
		}
		staged += rent()
		held += rent()
	}
	n := time.Duration(b.N)
	b.ReportMetric(ms(staged/n), "ms/staged")
	b.ReportMetric(ms(held/n), "ms/held")
	b.ReportMetric(float64(staged)/float64(held), "staged/held")
	b.ReportMetric(float64(d.Bytes)/(staged-held).Seconds()*float64(b.N)/1e6, "MB/s-staging")
}
