package renter

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"
)

// A provider that stamps a telemetry beat ahead of the renter's clock (so
// that the lease would be metered, and paid, to a time not yet served) has
// the beat refused and counted against it once, and the renter meters to
// the last beat it could verify.
func TestABeatStampedAheadIsRefusedAndCountsAgainstItsProvider(t *testing.T) {
	prov, rent, clk, lease, chain := leaseOnMocknet(t, "lease-ahead", time.Hour)
	start := time.UnixMilli(lease.StartUnixMs)
	var frames []*pb.JobFrame
	for _, at := range []time.Time{start.Add(5 * time.Second), start.Add(time.Hour), start.Add(50 * time.Minute)} {
		env, err := chain.Next(at, nil)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, &pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: env}})
	}
	rent.SetStreamHandler("/test/job", func(s network.Stream) {})
	prov.SetStreamHandler("/test/job", func(s network.Stream) {
		for _, fr := range frames {
			if err := p2p.WriteMsg(s, fr); err != nil {
				t.Error(err)
			}
		}
		s.Close()
	})

	type seen struct {
		p    peer.ID
		good bool
		w    float64
		what string
	}
	var observed []seen
	store := records.Store{D: dssync.MutexWrap(ds.NewMapDatastore()), Clock: clk}
	r := &Renter{Clock: clk, ctx: context.Background(), Store: store, Observe: func(p peer.ID, good bool, w float64, what string) {
		observed = append(observed, seen{p, good, w, what})
	}}
	var said []string
	f := &Follow{R: r, Lease: lease, tm: market.Term{Lease: lease}, rec: &records.Lease{ID: lease.Id, Role: records.Renter, State: records.Active}, out: RentOutput{Progress: func(l string) { said = append(said, l) }}}
	f.beats = attest.NewFollower(prov.ID(), "", lease.Id, f.term())
	clk.Advance(10 * time.Minute)
	s, err := rent.NewStream(context.Background(), prov.ID(), "/test/job")
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := f.read(context.Background(), s); done {
		t.Fatal("a stream that ended without a receipt ended the lease")
	}

	if f.beats.Beats() != 1 || !f.last().Equal(start.Add(5*time.Second).Truncate(time.Millisecond)) {
		t.Errorf("verified %d beats, the last at %s; want only the first, at %s", f.beats.Beats(), f.last(), start.Add(5*time.Second))
	}
	if rec, err := store.Get(context.Background(), lease.Id); err != nil || rec.Beats != 1 || rec.LastBeat != start.Add(5*time.Second).UnixMilli() {
		t.Errorf("stored progress %+v (%v); want the one verified beat", rec, err)
	}
	if secs, _ := market.Meter(lease, f.last()); secs != 5 {
		t.Errorf("metered %d s; want 5 (to the last beat verified)", secs)
	}
	if len(observed) != 1 || observed[0].p != prov.ID() || observed[0].good || observed[0].w != reputation.WeightMistimed || !strings.Contains(observed[0].what, "ahead of this clock") {
		t.Errorf("observed %+v; want one failure of weight %v for the provider, naming the beat ahead", observed, float64(reputation.WeightMistimed))
	}
	if n := len(said); n != 2 || !strings.Contains(said[0], "telemetry beat refused") {
		t.Errorf("the renter was told %q; want each refused beat named", said)
	}
}

// A provider that holds the job stream open past the lease's term and
// sends no receipt does not hold the renter's follow: the stream lives
// while beats come, and ReceiptWait after the term's end read gives up
// with errNoReceipt (run then counts the provider gone and the renter's
// own receipt pays for the beats it verified). A stream attached later
// still has AttachedWait to bring what the provider holds.
func TestAProviderThatSendsNoReceiptIsNotWaitedForPastTheTerm(t *testing.T) {
	prov, rent, clk, lease, chain := leaseOnMocknet(t, "lease-silent", time.Minute)
	start := time.UnixMilli(lease.StartUnixMs)
	beat := func(at time.Time) *pb.JobFrame {
		env, err := chain.Next(at, nil)
		if err != nil {
			t.Error(err)
		}
		return &pb.JobFrame{Kind: &pb.JobFrame_Heartbeat{Heartbeat: env}}
	}
	// The provider counts the bytes it sent and the renter's stream those
	// read (the follower's beats are read's alone while it runs): that a
	// beat's bytes were read shows the stream still lived.
	var sent, got, sentBeats atomic.Int64
	send := func(s network.Stream, fr *pb.JobFrame) {
		n := proto.Size(fr)
		sent.Add(int64(n + len(binary.AppendUvarint(nil, uint64(n)))))
		sentBeats.Add(1) // after sent: a count read first vouches for the bytes read after
		p2p.WriteMsg(s, fr)
	}
	second, third, hold := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(hold)
	prov.SetStreamHandler("/test/job/late", func(s network.Stream) {
		defer s.Reset()
		<-third
		send(s, beat(start.Add(55*time.Second)))
		<-hold
	})
	prov.SetStreamHandler("/test/job", func(s network.Stream) {
		defer s.Reset()
		send(s, beat(start.Add(10*time.Second)))
		<-second
		send(s, beat(start.Add(50*time.Second)))
		<-hold // and never a receipt
	})

	store := records.Store{D: dssync.MutexWrap(ds.NewMapDatastore()), Clock: clk}
	r := &Renter{Clock: clk, ctx: context.Background(), Store: store, Observe: func(peer.ID, bool, float64, string) {}}
	f := &Follow{R: r, Lease: lease, tm: market.Term{Lease: lease}, rec: &records.Lease{ID: lease.Id, Role: records.Renter, State: records.Active}, out: RentOutput{Progress: func(string) {}}}
	f.beats = attest.NewFollower(prov.ID(), "", lease.Id, f.term())
	s, err := rent.NewStream(context.Background(), prov.ID(), "/test/job")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		done bool
		err  error
	}
	res := make(chan result, 1)
	read := func(s network.Stream) {
		done, err := f.read(context.Background(), countingStream{s, &got})
		res <- result{done, err}
	}
	go read(s)
	// waitRead waits until the renter has read the nth beat sent.
	waitRead := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if sentBeats.Load() >= int64(n) && got.Load() >= sent.Load() {
				return
			}
			select {
			case r := <-res:
				t.Fatalf("read ended (%v, %v) before the renter read beat %d; want the stream live", r.done, r.err, n)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the renter read %d of %d bytes sent, want beat %d", got.Load(), sent.Load(), n)
			}
		}
	}
	waitRead(1)
	// A minute short of the wait: the stream still carries beats.
	clk.Advance(clk.Until(f.tm.End().Add(ReceiptWait - time.Minute)))
	close(second)
	waitRead(2)
	gaveUp := func(when string) {
		t.Helper()
		select {
		case r := <-res:
			if r.done || !errors.Is(r.err, errNoReceipt) {
				t.Errorf("read ended with (%v, %v) %s; want not done, %v", r.done, r.err, when, errNoReceipt)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("read still waits for a receipt %s", when)
		}
	}
	clk.Advance(2 * time.Minute)
	gaveUp("2 minutes past the term and ReceiptWait")

	late, err := rent.NewStream(context.Background(), prov.ID(), "/test/job/late")
	if err != nil {
		t.Fatal(err)
	}
	go read(late)
	close(third)
	waitRead(3)
	clk.Advance(AttachedWait + time.Second)
	gaveUp("on a stream attached late, past AttachedWait")
	if n := f.beats.Beats(); n != 3 {
		t.Errorf("%d beats verified, want the 3 sent", n)
	}
}

// countingStream counts the bytes read from its stream in n.
type countingStream struct {
	network.Stream
	n *atomic.Int64
}

func (c countingStream) Read(b []byte) (int, error) {
	k, err := c.Stream.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// leaseOnMocknet is a lease of one GPU for d at a dollar an hour, starting
// now on a fake clock, from the first of two connected mocknet hosts (the
// provider, with its telemetry chain) to the second (the renter).
func leaseOnMocknet(t *testing.T, id string, d time.Duration) (prov, rent host.Host, clk *clock.Fake, lease *pb.Lease, chain *attest.Chain) {
	t.Helper()
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mn.Close() })
	prov, rent = mn.Hosts()[0], mn.Hosts()[1]
	clk = clock.NewFake()
	lease = &pb.Lease{Id: id, Renter: []byte(rent.ID()), Provider: []byte(prov.ID()), StartUnixMs: clk.Now().UnixMilli(),
		DurationSeconds: uint64(d / time.Second), PriceMicros: uint64(d / time.Second * 1000), Currency: "USD", GpuCount: 1}
	chain, err = attest.NewChain(prov.Peerstore().PrivKey(prov.ID()), "", lease.Id)
	if err != nil {
		t.Fatal(err)
	}
	return prov, rent, clk, lease, chain
}
