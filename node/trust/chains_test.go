package trust

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// chainNet serves each peer's chain as given, each block with the one
// beside it, and no receipts.
type chainNet struct {
	chains map[peer.ID][]*pb.ChainEntry
	asked  []peer.ID
}

func (n *chainNet) FetchReceipts(context.Context, peer.ID, peer.ID, func([]byte)) (int, error) {
	return 0, nil
}

func (n *chainNet) FetchChain(_ context.Context, p peer.ID, q p2p.ChainQuery, each func([]byte)) (int, error) {
	n.asked = append(n.asked, p)
	want := cmp.Or(q.Want, p2p.MaxChainReply)
	var picked []*pb.ChainEntry
	for _, e := range n.chains[p] {
		b, err := chain.Open(e.Block)
		if err != nil || b.Seq < q.From || q.About != "" && b.Counterparty() != q.About {
			continue
		}
		picked = append(picked, e)
	}
	if q.From == 0 {
		picked = picked[max(0, len(picked)-want):]
	}
	sent := 0
	for _, e := range picked[:min(want, len(picked))] {
		raw, _ := proto.Marshal(e)
		each(raw)
		sent++
	}
	return sent, nil
}

// A provider that never recorded a lease it failed is seen failing all
// the same: its renter holds the failure in its chain, half-signed over
// the term the provider co-signed, and a node learning about the
// provider reads the chains of the renters the provider's own chain
// shows it dealt with. A rewritten chain is reported as evidence, and
// nothing past the rewrite is learned.
func TestAHiddenFailureIsLearnedFromTheRentersChain(t *testing.T) {
	ctx := context.Background()
	prov, wronged, other := chaintest.NewParty(t), chaintest.NewParty(t), chaintest.NewParty(t)
	start := time.Now().Add(-10 * time.Hour)
	net := &chainNet{chains: map[peer.ID][]*pb.ChainEntry{}}
	serve := func(owner *chaintest.Party, b, link *chain.Block) {
		e := &pb.ChainEntry{Block: b.Signed}
		if link != nil {
			e.Link = link.Signed
		}
		net.chains[owner.ID] = append(net.chains[owner.ID], e)
	}
	// Two completed leases, recorded by both.
	for i, ren := range []*chaintest.Party{wronged, other} {
		l, cs := chaintest.Lease(t, "done", ren, prov, start.Add(time.Duration(i)*time.Hour))
		p := prov.Propose(t, chaintest.Receipt(l, cs, 30*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs)
		a := ren.Agree(t, p)
		serve(prov, p, a)
		serve(ren, a, p)
	}
	// The failed one: in the renter's chain alone.
	l, cs := chaintest.Lease(t, "failed", wronged, prov, start.Add(3*time.Hour))
	serve(wronged, wronged.Propose(t, chaintest.Receipt(l, cs, 5*time.Minute, pb.Outcome_OUTCOME_FAILED), cs), nil)

	var reported [][]byte
	d := dssync.MutexWrap(ds.NewMapDatastore())
	r := New(Deps{Self: "me", Swarm: chaintest.Swarm, Seeds: []peer.ID{wronged.ID, other.ID}, Store: records.Store{D: d}, Saved: d, Net: net,
		Report:    func(_ context.Context, ev []byte) error { reported = append(reported, ev); return nil },
		Providers: func() []peer.ID { return nil }, Clock: clock.System(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if got := r.learnFrom(ctx, prov.ID); got != 1 {
		t.Fatalf("learned %d complaints of the provider, want its renter's 1 (asked %v)", got, net.asked)
	}
	if err := r.recompute(ctx); err != nil {
		t.Fatal(err)
	}
	if sc := r.Scores().Of(prov.ID); sc.Failures != 1 {
		t.Errorf("the provider's score after its renters' chains: %+v", sc)
	}

	// Stored, it is read again after a restart.
	again := New(Deps{Self: "me", Swarm: chaintest.Swarm, Seeds: []peer.ID{wronged.ID, other.ID}, Store: records.Store{D: d}, Saved: d,
		Providers: func() []peer.ID { return nil }, Clock: clock.System(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := again.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := again.recompute(ctx); err != nil {
		t.Fatal(err)
	}
	if sc := again.Scores().Of(prov.ID); sc.Failures != 1 {
		t.Errorf("the provider's score after a restart: %+v", sc)
	}

	// The renter rewrites its first record: its chain now shows a broken
	// link, which is reported, and its complaint after it is not learned.
	first := net.chains[wronged.ID][0]
	b, err := chain.Open(first.Block)
	if err != nil {
		t.Fatal(err)
	}
	rewritten := chaintest.Resign(t, wronged.Key, b, func(m *pb.Block) { m.LinkSeq++ })
	net.chains[wronged.ID][0] = &pb.ChainEntry{Block: rewritten.Signed}
	fresh := New(Deps{Self: "me", Swarm: chaintest.Swarm, Seeds: []peer.ID{wronged.ID, other.ID}, Store: records.Store{D: dssync.MutexWrap(ds.NewMapDatastore())},
		Saved: dssync.MutexWrap(ds.NewMapDatastore()), Net: net,
		Report:    func(_ context.Context, ev []byte) error { reported = append(reported, ev); return nil },
		Providers: func() []peer.ID { return nil }, Clock: clock.System(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if got := fresh.learnFrom(ctx, prov.ID); got != 0 {
		t.Errorf("learned %d complaints from a rewritten chain", got)
	}
	if len(reported) != 1 {
		t.Fatalf("%d pieces of evidence reported, want the rewrite's", len(reported))
	}
	if who, err := attest.VerifyEvidence(reported[0], chaintest.Swarm, nil); err != nil || len(who) != 1 || who[0] != wronged.ID {
		t.Errorf("the evidence proves %v (%v), want the renter that rewrote its chain", who, err)
	}
}
