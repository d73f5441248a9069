package data

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// The staging benchmarks run on mocknet links of benchLink each way:
// every holder reaches the fetcher at that bandwidth and latency, as a
// plain copy of the same bytes does.
var benchLink = mocknet.LinkOptions{Latency: 5 * time.Millisecond, Bandwidth: 64 << 20}

// benchBytes is the dataset's size: IDLEGRID_BENCH_STAGE_MIB, 128 MiB
// unless set.
func benchBytes(b *testing.B) int {
	if s := os.Getenv("IDLEGRID_BENCH_STAGE_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("IDLEGRID_BENCH_STAGE_MIB %q: want a number of MiB", s)
		}
		return n << 20
	}
	return 128 << 20
}

// plainCopy is the reference: the bytes over one stream on one link.
func plainCopy(b *testing.B, mn mocknet.Mocknet, size int) float64 {
	from, err := mn.GenPeer()
	if err != nil {
		b.Fatal(err)
	}
	to, err := mn.GenPeer()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mn.LinkPeers(from.ID(), to.ID()); err != nil {
		b.Fatal(err)
	}
	got := make(chan int64, 1)
	to.SetStreamHandler("/bench/copy", func(s network.Stream) {
		n, _ := io.Copy(io.Discard, s)
		s.Close()
		got <- n
	})
	if _, err := mn.ConnectPeers(from.ID(), to.ID()); err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	rand.Read(chunk)
	start := time.Now()
	s, err := from.NewStream(context.Background(), to.ID(), "/bench/copy")
	if err != nil {
		b.Fatal(err)
	}
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := s.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
			b.Fatal(err)
		}
	}
	s.CloseWrite()
	if n := <-got; n != int64(size) {
		b.Fatalf("copied %d bytes of %d", n, size)
	}
	s.Close()
	return float64(size) / time.Since(start).Seconds()
}

// benchSet writes size random bytes as a dataset's one file, and returns
// its folder and the bytes.
func benchSet(b *testing.B, size int) (string, []byte) {
	dir := filepath.Join(b.TempDir(), "set")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir, data
}

// mockPeer is a peer of mn with an exchange over a store of its own.
func mockPeer(b *testing.B, mn mocknet.Mocknet) *peerNode {
	h, err := mn.GenPeer()
	if err != nil {
		b.Fatal(err)
	}
	s := Open(dssync.MutexWrap(ds.NewMapDatastore()), 1<<40, nil)
	x := s.StartExchange(context.Background(), ExchangeConfig{Host: h, Prefix: testPrefix})
	b.Cleanup(func() { x.Close() })
	return &peerNode{h: h, s: s, x: x}
}

// linkUp links and connects a to b on mn.
func linkUp(b *testing.B, mn mocknet.Mocknet, a, c *peerNode) {
	if _, err := mn.LinkPeers(a.h.ID(), c.h.ID()); err != nil {
		b.Fatal(err)
	}
	if _, err := mn.ConnectPeers(a.h.ID(), c.h.ID()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStaging stages one dataset from 1, 2 and 4 holders over
// mocknet links of benchLink, beside a plain copy of the same bytes on
// one such link: MB/s, and x_plain, the ratio to the plain copy measured
// in the same run.
func BenchmarkStaging(b *testing.B) {
	size := benchBytes(b)
	ctx := context.Background()
	mn := mocknet.New()
	defer mn.Close()
	mn.SetLinkDefaults(benchLink)
	plain := plainCopy(b, mn, size)
	dir, _ := benchSet(b, size)
	var holders []*peerNode
	var root cid.Cid
	var total int64
	for range 4 {
		p := mockPeer(b, mn)
		d, err := p.s.Add(ctx, dir, false)
		if err != nil {
			b.Fatal(err)
		}
		root, total = cid.MustParse(d.CID), d.Bytes
		holders = append(holders, p)
	}
	b.Run("plain-copy", func(b *testing.B) {
		b.ReportMetric(plain/1e6, "MB/s")
	})
	for _, n := range []int{1, 2, 4} {
		b.Run(strconv.Itoa(n)+"-holders", func(b *testing.B) {
			var elapsed time.Duration
			for range b.N {
				c := mockPeer(b, mn)
				var from []peer.ID
				for _, h := range holders[:n] {
					linkUp(b, mn, c, h)
					from = append(from, h.h.ID())
				}
				start := time.Now()
				if _, err := c.x.Fetch(ctx, root, total, from, nil); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			rate := float64(total) * float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rate/1e6, "MB/s")
			b.ReportMetric(rate/plain, "x_plain")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStagingCPU is the CPU a fetch from one holder on unbounded
// links costs per GiB (both ends, in this one process), beside SHA-256
// of the same bytes: cpu_s/GiB and x_sha256.
func BenchmarkStagingCPU(b *testing.B) {
	size := benchBytes(b)
	ctx := context.Background()
	mn := mocknet.New()
	defer mn.Close()
	dir, data := benchSet(b, size)
	holder := mockPeer(b, mn)
	d, err := holder.s.Add(ctx, dir, false)
	if err != nil {
		b.Fatal(err)
	}
	root := cid.MustParse(d.CID)
	t0 := cpuTime(b)
	_ = sha256.Sum256(data)
	shaCPU := cpuTime(b) - t0
	var fetchCPU time.Duration
	b.ResetTimer()
	for range b.N {
		c := mockPeer(b, mn)
		linkUp(b, mn, c, holder)
		t := cpuTime(b)
		if _, err := c.x.Fetch(ctx, root, d.Bytes, []peer.ID{holder.h.ID()}, nil); err != nil {
			b.Fatal(err)
		}
		fetchCPU += cpuTime(b) - t
	}
	perGiB := fetchCPU.Seconds() / float64(b.N) / (float64(size) / (1 << 30))
	b.ReportMetric(perGiB, "cpu_s/GiB")
	b.ReportMetric(fetchCPU.Seconds()/float64(b.N)/max(shaCPU.Seconds(), 1e-9), "x_sha256")
}
