package renter

import (
	"context"
	"strings"
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
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// A provider that stamps a telemetry beat ahead of the renter's clock (so
// that the lease would be metered, and paid, to a time not yet served) has
// the beat refused and counted against it once, and the renter meters to
// the last beat it could verify.
func TestABeatStampedAheadIsRefusedAndCountsAgainstItsProvider(t *testing.T) {
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()
	prov, rent := mn.Hosts()[0], mn.Hosts()[1]
	clk := clock.NewFake()
	start := clk.Now()
	lease := &pb.Lease{Id: "lease-ahead", Renter: []byte(rent.ID()), Provider: []byte(prov.ID()), StartUnixMs: start.UnixMilli(),
		DurationSeconds: 3600, PriceMicros: 3_600_000, Currency: "USD", GpuCount: 1}

	chain, err := attest.NewChain(prov.Peerstore().PrivKey(prov.ID()), "", lease.Id)
	if err != nil {
		t.Fatal(err)
	}
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
	f := &Follow{R: r, Lease: lease, rec: &records.Lease{ID: lease.Id, Role: records.Renter, State: records.Active}, out: RentOutput{Progress: func(l string) { said = append(said, l) }}}
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
