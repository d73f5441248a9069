package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// loopbackHost is a real host on loopback TCP.
func loopbackHost(t testing.TB) host.Host {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{
		Identity: key, Swarm: p2p.Swarm{Name: "test"}, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")},
		ConnLow: 10, ConnHigh: 20, ConnGrace: time.Minute, Limits: p2p.DefaultLimits, UserAgent: "idlegrid/test",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// stagePair is a renter host and a provider host serving uploads into a
// stage with rules.
func stagePair(t testing.TB, rules transfer.StageRules) (renter, provider host.Host, stage *transfer.Stage) {
	t.Helper()
	stage, err := transfer.NewStage(filepath.Join(t.TempDir(), "staging"), rules)
	if err != nil {
		t.Fatal(err)
	}
	renter, provider = loopbackHost(t), loopbackHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p2p.ServeUploads(p2p.Server{Host: provider, Swarm: p2p.Swarm{Name: "test"}, Ctx: ctx}, func(from peer.ID, sum []byte, size int64) (int64, p2p.UploadSink, error) {
		have, part, err := stage.Begin(from, sum, size)
		if err != nil || part == nil {
			return have, nil, err
		}
		return have, part, nil
	})
	if err := renter.Connect(ctx, peer.AddrInfo{ID: provider.ID(), Addrs: provider.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return renter, provider, stage
}

// breaking reads r and fails once it has given after bytes: a stream
// that drops mid-upload.
type breaking struct {
	r     io.Reader
	after int64
}

func (b *breaking) Read(p []byte) (int, error) {
	if b.after <= 0 {
		return 0, errors.New("the network went away")
	}
	n, err := b.r.Read(p[:min(int64(len(p)), b.after)])
	b.after -= int64(n)
	return n, err
}

// An upload that breaks off resumes where the provider's copy ends: the
// second stream sends only what had not arrived, and the stage keeps the
// whole tar under its SHA-256. A tar whose bytes do not match its hash,
// one over the provider's size, and one past the renter's share are
// refused with the reason; a tar staged already is not sent again.
func TestAnUploadResumesWhereItBrokeOff(t *testing.T) {
	const size = 8 << 20
	renter, provider, stage := stagePair(t, transfer.StageRules{MaxBytes: size, PerRenter: size + 1<<20, MaxFiles: 8, Keep: time.Hour})
	data := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(data)
	sum := sha256.Sum256(data)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sw := p2p.Swarm{Name: "test"}

	var sent atomic.Int64
	open := func(breakAfter int64) func(int64) (io.ReadCloser, error) {
		return func(off int64) (io.ReadCloser, error) {
			r := io.Reader(&countReader{bytes.NewReader(data[off:]), &sent})
			if breakAfter > 0 {
				r = &breaking{r: r, after: breakAfter}
			}
			return io.NopCloser(r), nil
		}
	}
	if _, err := p2p.Upload(ctx, renter, sw, provider.ID(), sum[:], size, open(3<<20)); err == nil {
		t.Fatal("an upload whose stream broke succeeded")
	}
	firstSent := sent.Load()
	had, err := p2p.Upload(ctx, renter, sw, provider.ID(), sum[:], size, open(0))
	if err != nil {
		t.Fatalf("resumed upload: %v", err)
	}
	if had <= 0 || had > firstSent || sent.Load()-firstSent != size-had {
		t.Errorf("the resume started at byte %d after %d were sent, and sent %d more; want it to start where the provider's copy ended and send the rest", had, firstSent, sent.Load()-firstSent)
	}
	got, err := stage.Get(renter.ID(), sum[:], size)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(got.Path); !bytes.Equal(b, data) {
		t.Error("the staged tar differs from the one sent")
	}
	if had, err := p2p.Upload(ctx, renter, sw, provider.ID(), sum[:], size, open(0)); err != nil || had != size {
		t.Errorf("a tar staged already: had %d, %v; want it whole at once", had, err)
	}

	var refused *p2p.UploadRefusedError
	other := sha256.Sum256([]byte("other"))
	if _, err := p2p.Upload(ctx, renter, sw, provider.ID(), other[:], 1<<20, open(0)); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "want 1048576 bytes with") {
		t.Errorf("bytes that do not match their hash: %v", err)
	}
	if _, err := p2p.Upload(ctx, renter, sw, provider.ID(), other[:], size+1, open(0)); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "jobs.max_upload_mib") {
		t.Errorf("a tar over the provider's size: %v", err)
	}
	if _, err := p2p.Upload(ctx, renter, sw, provider.ID(), other[:], 2<<20, open(0)); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "this renter keeps") {
		t.Errorf("a tar past the renter's share: %v", err)
	}
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkUpload1GiB stages a 1 GiB tar from a file over a loopback
// libp2p TCP stream into a real stage (SHA-256 checked as it arrives),
// and, in the same run, sends the same file with cat(1) to two loopback
// TCP sockets: one whose reader discards what arrives (cat to a socket,
// the figure's reference) and one whose reader writes it into the same
// stage (a plain socket doing the stage's work, writing and hashing:
// what encryption and multiplexing add is the difference).
func BenchmarkUpload1GiB(b *testing.B) {
	const size = 1 << 30
	cat, err := exec.LookPath("cat")
	if err != nil {
		b.Fatal(err)
	}
	renter, provider, stage := stagePair(b, transfer.StageRules{MaxBytes: size, PerRenter: 2 * size, MaxFiles: 8, Keep: time.Hour})
	dir := b.TempDir()
	src := filepath.Join(dir, "data")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	rng := rand.New(rand.NewSource(2))
	if _, err := io.CopyN(io.MultiWriter(f, h), rng, size); err != nil {
		b.Fatal(err)
	}
	f.Close()
	sum := h.Sum(nil)
	open := func(off int64) (io.ReadCloser, error) {
		f, err := os.Open(src)
		if err == nil {
			_, err = f.Seek(off, io.SeekStart)
		}
		return f, err
	}
	// catTo sends src with cat to a loopback socket whose reader hands
	// each read to take, and returns how long until the reader had it all.
	catTo := func(take func([]byte) error) time.Duration {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		got := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- err
				return
			}
			defer c.Close()
			buf, n := make([]byte, 256<<10), 0
			for {
				k, err := c.Read(buf)
				if k > 0 {
					n += k
					if err := take(buf[:k]); err != nil {
						got <- err
						return
					}
				}
				if err == io.EOF && n == size {
					got <- nil
					return
				}
				if err != nil {
					got <- fmt.Errorf("the socket carried %d bytes: %v", n, err)
					return
				}
			}
		}()
		t0 := time.Now()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		out, err := c.(*net.TCPConn).File()
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(cat, src)
		cmd.Stdout = out
		err = cmd.Run()
		out.Close()
		if err != nil {
			b.Fatal(err)
		}
		if err := <-got; err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var viaUpload, viaCat, viaPlain time.Duration
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		stage.Remove(renter.ID(), sum)
		t0 := time.Now()
		if _, err := p2p.Upload(context.Background(), renter, p2p.Swarm{Name: "test"}, provider.ID(), sum, size, open); err != nil {
			b.Fatal(err)
		}
		viaUpload += time.Since(t0)
		viaCat += catTo(func([]byte) error { return nil })
		stage.Remove(renter.ID(), sum)
		_, part, err := stage.Begin(renter.ID(), sum, size)
		if err != nil || part == nil {
			b.Fatalf("a stage for the plain socket: %v, %v", part, err)
		}
		viaPlain += catTo(func(p []byte) error {
			_, err := part.Write(p)
			return err
		})
		if err := part.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	mibps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(mibps(viaUpload), "upload-MiB/s")
	b.ReportMetric(mibps(viaCat), "cat-MiB/s")
	b.ReportMetric(mibps(viaPlain), "plain-MiB/s")
	b.ReportMetric(viaCat.Seconds()/viaUpload.Seconds(), "upload/cat")
	b.ReportMetric(viaPlain.Seconds()/viaUpload.Seconds(), "upload/plain")
}

// failingWriter takes after bytes, then fails: a download whose stream
// drops.
type failingWriter struct {
	w     io.Writer
	after int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("the network went away")
	}
	n, err := f.w.Write(p[:min(len(p), f.after)])
	f.after -= n
	if err == nil && n < len(p) {
		err = errors.New("the network went away")
	}
	return n, err
}

// A lease's packed output is downloaded by its renter alone; a download
// that breaks off resumes from what arrived, and the whole tar matches
// the provider's SHA-256. An output too large is not kept, and the
// renter reads why.
func TestADownloadResumesWhereItBrokeOff(t *testing.T) {
	const size = 4 << 20
	renter, provider, stage := stagePair(t, transfer.StageRules{MaxBytes: size, PerRenter: 3 * size, MaxFiles: 8, Keep: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p2p.ServeDownloads(p2p.Server{Host: provider, Swarm: p2p.Swarm{Name: "test"}, Ctx: ctx}, func(_ context.Context, from peer.ID, lease string, index int) (io.ReadSeekCloser, int64, []byte, error) {
		return stage.Output(from, lease, index)
	})
	data := make([]byte, size)
	rand.New(rand.NewSource(4)).Read(data)
	if err := stage.PutOutput(renter.ID(), "lease-1", 0, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := stage.PutOutput(renter.ID(), "lease-1", 1, bytes.NewReader(make([]byte, size+1))); err == nil {
		t.Error("an output over MaxBytes was kept")
	}
	sw := p2p.Swarm{Name: "test"}
	var got bytes.Buffer
	if _, _, err := p2p.Download(ctx, renter, sw, provider.ID(), "lease-1", 0, 0, &failingWriter{w: &got, after: 1 << 20}); err == nil {
		t.Fatal("a download whose stream broke succeeded")
	}
	held := int64(got.Len())
	n, sum, err := p2p.Download(ctx, renter, sw, provider.ID(), "lease-1", 0, held, &got)
	want := sha256.Sum256(data)
	if err != nil || n != size || !bytes.Equal(got.Bytes(), data) || !bytes.Equal(sum, want[:]) || held != 1<<20 {
		t.Errorf("resumed from byte %d: %d bytes, %v; the tar %s the provider's, its sum %x", held, n, err, map[bool]string{true: "matches", false: "differs from"}[bytes.Equal(got.Bytes(), data)], sum)
	}
	var refused *p2p.DownloadRefusedError
	if _, _, err := p2p.Download(ctx, renter, sw, provider.ID(), "lease-1", 1, 0, io.Discard); !errors.As(err, &refused) || !strings.Contains(refused.Reason, "jobs.max_upload_mib") {
		t.Errorf("an output not kept: %v", err)
	}
	// Another peer finds none of this renter's outputs.
	other := loopbackHost(t)
	if err := other.Connect(ctx, peer.AddrInfo{ID: provider.ID(), Addrs: provider.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p2p.Download(ctx, other, sw, provider.ID(), "lease-1", 0, 0, io.Discard); !errors.As(err, &refused) {
		t.Errorf("another peer's download of the renter's output: %v", err)
	}
}

// A renter keeps at most MaxOutputsKept outputs at once, and one lease
// MaxOutputsPerLease: the next is refused, with the bound named, and its
// bytes are read to the end.
func TestARenterKeepsBoundedOutputs(t *testing.T) {
	stage, err := transfer.NewStage(t.TempDir(), transfer.StageRules{MaxBytes: 1 << 10, PerRenter: 1 << 20, MaxFiles: 8, Keep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	renter := loopbackHost(t).ID()
	for i := range transfer.MaxOutputsPerLease {
		if err := stage.PutOutput(renter, "lease-1", i, strings.NewReader("x")); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
	}
	r := strings.NewReader("one too many for the lease")
	if err := stage.PutOutput(renter, "lease-1", transfer.MaxOutputsPerLease, r); err == nil || !strings.Contains(err.Error(), "at most 16") || r.Len() != 0 {
		t.Errorf("output %d of a lease: %v, %d bytes left unread", transfer.MaxOutputsPerLease, err, r.Len())
	}
	for i := transfer.MaxOutputsPerLease; i < transfer.MaxOutputsKept; i++ {
		if err := stage.PutOutput(renter, "lease-2", i, strings.NewReader("x")); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
	}
	r = strings.NewReader("one too many")
	if err := stage.PutOutput(renter, "lease-3", 0, r); err == nil || !strings.Contains(err.Error(), "at most 32") || r.Len() != 0 {
		t.Errorf("output %d: %v, %d bytes left unread", transfer.MaxOutputsKept, err, r.Len())
	}
}
