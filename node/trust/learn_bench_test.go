package trust

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain/chaintest"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/trustchain"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"
)

// countedNet is a renter's ReceiptNet over host h, counting the
// exchanges it makes and the bytes their streams carry both ways.
type countedNet struct {
	h            host.Host
	trips, bytes atomic.Int64
	receiptBytes atomic.Int64 // of bytes, those of receipt exchanges
}

func (n *countedNet) FetchReceipts(ctx context.Context, p, subject peer.ID, each func([]byte)) (int, error) {
	n.trips.Add(1)
	before := n.bytes.Load()
	defer func() { n.receiptBytes.Add(n.bytes.Load() - before) }() // one exchange at a time
	return p2p.FetchReceipts(ctx, countingHost{n.h, n}, p2p.Swarm{}, p, subject, each)
}

func (n *countedNet) FetchChain(ctx context.Context, p peer.ID, q p2p.ChainQuery, each func([]byte)) (int, error) {
	n.trips.Add(1)
	return p2p.FetchChain(ctx, countingHost{n.h, n}, p2p.Swarm{}, p, q, each)
}

type countingHost struct {
	host.Host
	n *countedNet
}

func (h countingHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, err
	}
	return countedStream{s, h.n}, nil
}

type countedStream struct {
	network.Stream
	n *countedNet
}

func (s countedStream) Read(b []byte) (int, error) {
	k, err := s.Stream.Read(b)
	s.n.bytes.Add(int64(k))
	return k, err
}

func (s countedStream) Write(b []byte) (int, error) {
	k, err := s.Stream.Write(b)
	s.n.bytes.Add(int64(k))
	return k, err
}

// chainWorld is providers and renters on mocknet, each serving its chain
// of lease records (trustchain, on the chain protocol) and the co-signed
// receipts it holds (the receipts protocol), and a fresh renter's host
// that can reach them all.
type chainWorld struct {
	providers []*chaintest.Party
	keepers   map[peer.ID]*trustchain.Keeper
	fresh     host.Host
}

// newChainWorld makes each of n providers end leases leases, one an
// hour up to now, each with a renter of renters chosen at random; one in
// ten failed, and only its renter recorded it (a proposal its provider
// never completed), the others both did.
func newChainWorld(b *testing.B, providers, renters, leases int) *chainWorld {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	mn := mocknet.New()
	b.Cleanup(func() { mn.Close() })
	w := &chainWorld{keepers: map[peer.ID]*trustchain.Keeper{}}
	receipts := map[peer.ID][][]byte{}
	var all []*chaintest.Party
	for i := range providers + renters {
		p := chaintest.NewParty(b)
		all = append(all, p)
		k, err := trustchain.Open(ctx, p.Key, dssync.MutexWrap(ds.NewMapDatastore()))
		if err != nil {
			b.Fatal(err)
		}
		w.keepers[p.ID] = k
		if i < providers {
			w.providers = append(w.providers, p)
		}
	}
	r := rand.New(rand.NewPCG(28, 28))
	now := time.Now()
	for _, prov := range w.providers {
		pk := w.keepers[prov.ID]
		for j := range leases {
			ren := all[providers+r.IntN(renters)]
			rk := w.keepers[ren.ID]
			l, cs := chaintest.Lease(b, fmt.Sprint("lease-", j), ren, prov, now.Add(-time.Duration(leases-j+1)*time.Hour))
			if r.IntN(10) == 0 {
				if _, err := rk.Propose(ctx, chaintest.Receipt(l, cs, 10*time.Minute, pb.Outcome_OUTCOME_FAILED), cs, nil); err != nil {
					b.Fatal(err)
				}
				continue
			}
			p, err := pk.Propose(ctx, chaintest.Receipt(l, cs, 50*time.Minute, pb.Outcome_OUTCOME_COMPLETED), cs, nil)
			if err != nil {
				b.Fatal(err)
			}
			rcs, err := market.NewCoSigned(prov.Key, market.Provider, p.Receipt())
			if err == nil {
				err = market.CoSign[*pb.Receipt](ren.Key, market.Renter, rcs)
			}
			if err != nil {
				b.Fatal(err)
			}
			a, err := rk.Agree(ctx, p.Signed, rcs.Body)
			if err == nil {
				err = pk.Completed(ctx, p, a.Signed)
			}
			if err != nil {
				b.Fatal(err)
			}
			raw, _ := proto.Marshal(rcs)
			receipts[prov.ID] = append([][]byte{raw}, receipts[prov.ID]...) // newest first
		}
	}
	for i, p := range all {
		h, err := mn.AddPeer(p.Key, ma.StringCast(fmt.Sprintf("/ip4/10.0.%d.%d/tcp/4001", i/250, i%250+1)))
		if err != nil {
			b.Fatal(err)
		}
		sv := p2p.Server{Host: h, Ctx: ctx}
		k := w.keepers[p.ID]
		p2p.ServeChain(sv, func(ctx context.Context, q p2p.ChainQuery) ([][]byte, error) {
			return k.Range(ctx, q.From, q.Want, q.About)
		})
		held := receipts[p.ID]
		p2p.ServeReceipts(sv, func(context.Context, peer.ID) ([][]byte, error) { return held, nil })
	}
	fresh, err := mn.GenPeer()
	if err != nil {
		b.Fatal(err)
	}
	if err := mn.LinkAll(); err != nil {
		b.Fatal(err)
	}
	for _, h := range mn.Hosts() {
		fresh.Peerstore().AddAddrs(h.ID(), h.Addrs(), time.Hour)
	}
	w.fresh = fresh
	return w
}

// freshRenter is a node that learned nothing yet, learning over net.
func (w *chainWorld) freshRenter(net ReceiptNet) *Reputation {
	d := dssync.MutexWrap(ds.NewMapDatastore())
	return New(Deps{Self: w.fresh.ID(), Swarm: chaintest.Swarm, Store: records.Store{D: d}, Saved: d, Net: net,
		Providers: func() []peer.ID { return nil }, Clock: clock.System(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// wholeChains asks p for its receipts, and reads its chain whole from
// seq 1 and, whole too, the chains of the last chainCounterparties peers
// it shows: the reference, what learning about a provider read before
// chain queries.
func wholeChains(ctx context.Context, net ReceiptNet, p peer.ID) {
	net.FetchReceipts(ctx, p, p, func([]byte) {})
	read := func(q peer.ID) []peer.ID {
		var with []peer.ID
		for from := uint64(1); ; {
			n, err := net.FetchChain(ctx, q, p2p.ChainQuery{From: from}, func(raw []byte) {
				e := new(pb.ChainEntry)
				if market.Unmarshal(raw, e) == nil && e.Block != nil {
					with = append(with, peer.ID(blockOf(e).Counterparty))
				}
			})
			from += uint64(n)
			if err != nil || n < p2p.MaxChainReply {
				return with
			}
		}
	}
	with := read(p)
	asked := map[peer.ID]bool{}
	for i := len(with) - 1; i >= 0 && len(asked) < chainCounterparties; i-- {
		if !asked[with[i]] {
			asked[with[i]] = true
			read(with[i])
		}
	}
}

func blockOf(e *pb.ChainEntry) *pb.Block {
	b := new(pb.Block)
	market.Unmarshal(e.Block.Body, b)
	return b
}

// BenchmarkAFreshRenterLearnsFiftyProviders measures what a renter that
// learned nothing yet exchanges to rank the 50 best offers: it learns
// about each offer's provider (the co-signed receipts the provider
// holds of itself, its newest chainRecent blocks, and its last
// chainCounterparties counterparties' blocks of leases with it) from 250
// peers on mocknet, 50 providers with 60 leases each among 200 renters,
// counted at the renter's streams. The reference, in the same run over
// the same hosts, asks for the same receipts and reads the same chains
// whole from seq 1, as learning did before chain queries.
//
//	go test ./node/trust -run '^$' -bench FreshRenter -benchtime 3x
func BenchmarkAFreshRenterLearnsFiftyProviders(b *testing.B) {
	w := newChainWorld(b, 50, 200, 60)
	ctx := context.Background()
	var trips, bytes, receiptBytes, refTrips, refBytes, learned int64
	b.ResetTimer()
	for range b.N {
		net := &countedNet{h: w.fresh}
		r := w.freshRenter(net)
		for _, p := range w.providers {
			learned += int64(r.learnFrom(ctx, p.ID))
		}
		trips, bytes, receiptBytes = trips+net.trips.Load(), bytes+net.bytes.Load(), receiptBytes+net.receiptBytes.Load()
		ref := &countedNet{h: w.fresh}
		for _, p := range w.providers {
			wholeChains(ctx, ref, p.ID)
		}
		refTrips, refBytes = refTrips+ref.trips.Load(), refBytes+ref.bytes.Load()
	}
	n := float64(b.N)
	b.ReportMetric(float64(trips)/n, "round-trips")
	b.ReportMetric(float64(bytes)/n/1024, "KiB")
	b.ReportMetric(float64(receiptBytes)/n/1024, "receipts-KiB")
	b.ReportMetric(float64(learned)/n, "records-learned")
	b.ReportMetric(float64(refTrips)/n, "ref-round-trips")
	b.ReportMetric(float64(refBytes)/n/1024, "ref-KiB")
	b.ReportMetric(float64(bytes)/float64(refBytes), "x-whole-chains")
	if learned == 0 {
		b.Fatal("nothing learned")
	}
}
