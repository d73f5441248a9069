//go:build !race

package p2p_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// bookFamilies are the GPU models of a simulated swarm's book, one of each
// of ten families (ten shards).
var bookFamilies = []string{"H100 SXM", "A100 SXM 80GB", "RTX 4090", "L40S", "H200", "B200", "L4", "A10", "RTX 3090", "V100"}

// renterBest is how many offers a fresh renter ranks.
const renterBest = 50

// renterFigures are what a fresh light renter pays in a swarm whose
// nodes hold its book: the offers it fetched, the simulated time from its
// start to its book synced, and its CPU to rank them, beside raw Ed25519
// verifies of as many envelopes timed the same way.
type renterFigures struct {
	book, bookBytes     int           // every offer of the swarm, and the envelopes' bytes
	fetched, fetchBytes int           // what the renter's sync brought: its bid's shards
	join, sync          time.Duration // simulated: its start (bootstrap dialled, discovery started), its book's sync
	cpu, rawCPU         time.Duration // its thread's CPU: open, validate, put and match; raw verifies
	ranked              int           // candidates among the best renterBest
}

// bookOffer is one offer of a swarm's book: its envelope, and a raw
// message as long as what the envelope signs, signed by the same key.
type bookOffer struct {
	env   []byte
	pub   crypto.PubKey
	msg   []byte
	sig   []byte
	shard string
}

// swarmBook signs o offers, each by a provider of its own, spread over
// bookFamilies, with prices, regions, sizes and tiers drawn from a
// seeded source.
func swarmBook(t testing.TB, o int, now time.Time) []bookOffer {
	t.Helper()
	r := mrand.New(mrand.NewPCG(7, uint64(o)))
	regions := []string{"DE", "FR", "NL", "SE", "PL", "US", "CA", "JP", "SG", "BR"}
	book := make([]bookOffer, o)
	for i := range book {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(key)
		model := bookFamilies[i%len(bookFamilies)]
		offer := &pb.Offer{
			Header: &pb.Header{Version: market.Version, Issuer: []byte(id), Id: fmt.Sprint("gpus-", i), Seq: 1,
				CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
			Gpus:     []*pb.GPUGroup{{Model: model, Count: uint32(1 << r.IntN(4)), VramBytes: 80 << 30, ComputeCapability: 90}},
			Host:     &pb.HostSpec{CpuCores: 64, RamBytes: 512 << 30},
			Region:   &pb.Region{Country: regions[r.IntN(len(regions))]},
			Currency: "USD", PriceMicros: 500_000 + r.Uint64N(3_500_000), MinDurationSeconds: 60, MaxDurationSeconds: 7 * 86400,
			Tiers: []pb.Tier{pb.Tier_TIER_SILVER, pb.Tier_TIER_GOLD},
		}
		env, err := market.Sign(key, offer)
		if err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, len(env)-ed25519Overhead)
		rand.Read(msg)
		sig, err := key.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		book[i] = bookOffer{env: env, pub: key.GetPublic(), msg: msg, sig: sig, shard: p2p.ModelShard(model)}
	}
	return book
}

// ed25519Overhead is about what an envelope adds to the bytes it signs:
// the issuer's public key and the signature, with their framing.
const ed25519Overhead = 110

// measureFreshRenter has every node of s serve a book of n/2 offers
// (what every node holds once the offers' gossip has reached it, as
// Deliver finds it does), then starts a fresh node, which syncs from its
// bootstrap peer the shards its bid names (H100 and A100: two of ten),
// checks each offer as a node does (open and verify, validate, put) and
// ranks the best renterBest. The fetch is in simulated time; the CPU is
// the renter's thread's, beside raw verifies of as many envelopes.
func measureFreshRenter(ctx context.Context, t testing.TB, s *p2ptest.Swarm) renterFigures {
	t.Helper()
	sw := p2p.Swarm{Name: p2ptest.DefaultSwarmName}
	now := time.Now()
	book := swarmBook(t, max(len(s.Nodes)/2, len(bookFamilies)), now)
	envs := make([][]byte, len(book))
	var f renterFigures
	for i, o := range book {
		envs[i] = o.env
		f.bookBytes += len(o.env)
	}
	f.book = len(book)
	source := func(context.Context) ([][]byte, error) { return envs, nil }
	for _, nd := range s.Nodes {
		p2p.ServeBookSync(p2p.Server{Host: nd.Host, Swarm: sw, Ctx: ctx}, source)
	}
	bid := &pb.Bid{
		Header: &pb.Header{Version: market.Version, Issuer: []byte("renter"), Id: "fresh", Seq: 1,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpu:      &pb.GPURequirement{Models: []string{"H100", "A100"}, MinVramBytes: 40 << 30, Count: 1},
		Tier:     pb.Tier_TIER_SILVER,
		Currency: "USD", MaxPriceMicros: 4_000_000, DurationSeconds: 3600,
		EarliestStartUnixMs: now.UnixMilli(), LatestStartUnixMs: now.Add(6 * time.Hour).UnixMilli(),
	}
	shards := p2p.BidShards(bid)

	start := time.Now()
	renter, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	f.join, start = time.Since(start), time.Now()
	var got [][]byte
	if _, err := p2p.FetchShards(ctx, renter.Host, sw, s.Nodes[0].Host.ID(), shards, nil, func(env []byte) {
		got = append(got, env)
		f.fetchBytes += len(env)
	}); err != nil {
		t.Fatalf("the fresh renter's book sync: %v", err)
	}
	f.sync, f.fetched = time.Since(start), len(got)
	want := 0
	for _, o := range book {
		if slices.Contains(shards, o.shard) {
			want++
		}
	}
	if f.fetched != want {
		t.Errorf("the fresh renter's sync of %v brought %d offers, want the %d of those shards", shards, f.fetched, want)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU(t)
	limits, mine := market.DefaultLimits(), market.NewBook()
	for _, env := range got {
		o, err := market.Open[*pb.Offer](env)
		if err == nil {
			err = limits.ValidateOffer(o, now)
		}
		if err == nil {
			err = mine.PutOffer(o, now)
		}
		if err != nil {
			t.Fatalf("the fresh renter's ingest: %v", err)
		}
	}
	res := market.NewMatcher(market.DefaultMatchConfig(), nil, nil).Match(mine.Snapshot(), bid, now, renterBest)
	t1 := threadCPU(t)
	for _, o := range book[:len(got)] {
		if ok, err := o.pub.Verify(o.msg, o.sig); !ok || err != nil {
			t.Fatalf("raw verify: %v %v", ok, err)
		}
	}
	f.cpu, f.rawCPU, f.ranked = t1-t0, threadCPU(t)-t1, len(res.Candidates)
	if f.ranked == 0 || f.ranked > renterBest {
		t.Errorf("the fresh renter ranked %d offers, want 1 to %d", f.ranked, renterBest)
	}
	for _, c := range res.Candidates {
		if sh := p2p.ModelShard(c.Model); !slices.Contains(shards, sh) {
			t.Errorf("the fresh renter ranked an offer of %s (%s), not on its bid's %v", c.Model, sh, shards)
		}
	}
	return f
}

// withNewcomer is lat and one more row, for a node that joins later: it
// sits beside node newcomerNear(lat), as far as it from every other node,
// and near it (a quarter of that node's nearest RTT).
func withNewcomer(lat p2ptest.Matrix) p2ptest.Matrix {
	n, k := len(lat), newcomerNear(lat)
	out := make(p2ptest.Matrix, n+1)
	for i := range lat {
		out[i] = append(slices.Clone(lat[i]), lat[i][k])
	}
	out[n] = append(slices.Clone(lat[k]), 0)
	near := math.Inf(1)
	for j, v := range lat[k] {
		if j != k && v > 0 {
			near = min(near, v)
		}
	}
	out[n][k], out[k][n] = near/4, near/4
	return out
}

// newcomerNear is the node a newcomer sits beside: node len(lat)/2, or
// the first after it that is not beside node 0. The newcomer joins
// through node 0, and an expanded matrix (Matrix.Expand) makes every
// node whose index is a multiple of the base's rows a jittered copy of
// node 0, a fraction of a millisecond from it; a newcomer there would
// start and sync in no time. Beside is nearer than besideNode0.
func newcomerNear(lat p2ptest.Matrix) int {
	beside := besideNode0(lat)
	k := len(lat) / 2
	for k < len(lat)-1 && lat[k][0] < beside {
		k++
	}
	return k
}

// besideNode0 is the RTT under which a node of lat is beside node 0: a
// tenth of node 0's median RTT.
func besideNode0(lat p2ptest.Matrix) float64 {
	row := slices.Clone(lat[0])
	slices.Sort(row)
	return row[len(row)/2] / 10
}

// threadCPU is the CPU time of the calling goroutine's thread (it must be
// locked to it).
func threadCPU(t testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// String is the figures as a note's line.
func (f renterFigures) String() string {
	return fmt.Sprintf("book %d offers (%.0f KB of envelopes); a fresh renter started in %v simulated, then fetched %d offers (%.0f KB, its bid's 2 of %d shards) in %v, and ranked its %d best in %v of CPU, %.2f times raw Ed25519 verifies of as many (%v)",
		f.book, float64(f.bookBytes)/1e3, f.join.Round(time.Millisecond), f.fetched, float64(f.fetchBytes)/1e3, len(bookFamilies), f.sync.Round(time.Millisecond),
		f.ranked, f.cpu.Round(time.Microsecond), float64(f.cpu)/float64(max(f.rawCPU, 1)), f.rawCPU.Round(time.Microsecond))
}

// A fresh renter in a small simulated swarm fetches from its bootstrap
// peer the offers of its bid's shards alone, every one, and ranks them.
func TestAFreshRenterRanksTheOffersOfItsShards(t *testing.T) {
	p2ptest.Simulate(t, func(t *testing.T) {
		lat := withNewcomer(planetLabRows(t, 0, 20))
		s := p2ptest.NewMocknet(t, 20, p2ptest.WithLatency(lat, 0), p2ptest.WithLazyLinks())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f := measureFreshRenter(ctx, t, s)
		t.Log(f)
		// Its sync is one exchange with node 0: no sooner than the link's
		// delay, within a few round trips.
		if oneWay := lat.OneWay(20, 0); f.sync < oneWay || f.sync > 20*oneWay {
			t.Errorf("the fresh renter's sync took %v simulated, want one to ten round trips of %v", f.sync, 2*oneWay)
		}
	})
}

// A newcomer does not sit beside node 0, through which it joins: on the
// expansion of a 200-row matrix to 2,000 nodes, node 1,000 is node 0's
// jittered copy, and the newcomer goes to the next node that is not; on
// 200 rows it goes beside node 100.
func TestANewcomerSitsAwayFromItsBootstrapPeer(t *testing.T) {
	base := planetLabRows(t, 0, 200)
	if k := newcomerNear(base); k != 100 {
		t.Errorf("on 200 rows the newcomer sits beside node %d, want 100", k)
	}
	lat := base.Expand(2000, 0.1, 7)
	beside := besideNode0(lat)
	if d := lat[1000][0]; d >= beside {
		t.Fatalf("node 1,000 is %.2f ms from node 0: the expansion no longer copies node 0 there, and this test shows nothing", d)
	}
	k := newcomerNear(lat)
	if k <= 1000 || lat[k][0] < beside {
		t.Errorf("on 2,000 nodes the newcomer sits beside node %d, %.2f ms from node 0", k, lat[k][0])
	}
	nl := withNewcomer(lat)
	if d := nl.OneWay(2000, 0); d < time.Millisecond {
		t.Errorf("the newcomer is %v from node 0", d)
	}
}
