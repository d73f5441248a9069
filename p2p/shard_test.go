package p2p_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

func TestShardsAreGPUFamilies(t *testing.T) {
	for _, tc := range []struct {
		model, want string
	}{
		{"H100 SXM", "h100"}, {"H100", "h100"}, {"A100 PCIe 80GB", "a100"}, {"A100", "a100"},
		{"RTX 4090", "rtx4090"}, {"NVIDIA GeForce RTX 4090", "rtx4090"},
		{"RTX PRO 6000 Blackwell Max-Q", "rtxpro6000blackwell"}, {"Quantum Widget 9", p2p.ShardOther},
	} {
		if got := p2p.ModelShard(tc.model); got != tc.want {
			t.Errorf("ModelShard(%q) = %q, want %q", tc.model, got, tc.want)
		}
		if err := p2p.ValidateShard(p2p.ModelShard(tc.model)); err != nil {
			t.Error(err)
		}
	}
	o := &pb.Offer{Gpus: []*pb.GPUGroup{{Model: "H100 SXM"}, {Model: "A100 SXM 80GB"}, {Model: "H100 PCIe"}}}
	if got := p2p.OfferShards(o); !slices.Equal(got, []string{"a100", "h100"}) {
		t.Errorf("an offer of H100s and A100s is on %v, want [a100 h100]", got)
	}
	if got := p2p.BidShards(&pb.Bid{Gpu: &pb.GPURequirement{}}); !slices.Equal(got, []string{p2p.ShardAny}) {
		t.Errorf("a bid for any GPU is on %v, want [%s]", got, p2p.ShardAny)
	}
	if got := p2p.BidShards(&pb.Bid{Gpu: &pb.GPURequirement{Models: []string{"A100 80GB", "H100"}}}); !slices.Equal(got, []string{"a100", "h100"}) {
		t.Errorf("a bid for A100 80GB or H100 is on %v, want [a100 h100]", got)
	}
	for _, bad := range []string{"", "H100", "h100/1", strings.Repeat("a", 41), "a b"} {
		if err := p2p.ValidateShard(bad); !errors.Is(err, p2p.ErrShard) {
			t.Errorf("ValidateShard(%q) = %v, want ErrShard", bad, err)
		}
	}
}

// gpuOffer is an offer of issuer s's GPUs of one model.
func gpuOffer(t testing.TB, s signer, name, model string) []byte {
	now := time.Now()
	o := &pb.Offer{
		Header: &pb.Header{Version: market.Version, Issuer: []byte(s.id), Id: name, Seq: 1,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpus:     []*pb.GPUGroup{{Model: model, Count: 4, VramBytes: 80 << 30, ComputeCapability: 90}},
		Region:   &pb.Region{Country: "DE"},
		Currency: "USD", PriceMicros: 1_500_000, MinDurationSeconds: 60, MaxDurationSeconds: 3600,
		Tiers: []pb.Tier{pb.Tier_TIER_SILVER},
	}
	env, err := market.Sign(s.key, o)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// received collects, per node, the offer IDs a subscription delivered.
type received struct {
	mu  sync.Mutex
	ids map[int][]string
}

func (r *received) of(i int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids[i])
}

func (r *received) drain(ctx context.Context, wg *sync.WaitGroup, i int, sub *pubsub.Subscription) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sub.Cancel()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			o := msg.ValidatorData.(*pb.Offer)
			r.mu.Lock()
			r.ids[i] = append(r.ids[i], o.Header.Id)
			r.mu.Unlock()
		}
	}()
}

// An offer is gossiped on its GPU family's shard and on the offers topic:
// a node that follows its family's shard gets it, one that follows
// another family's does not, and one that follows the whole topic (as
// every node of the last version does) gets it too. An offer relayed on
// a shard it is not of is rejected. Six nodes: 0 publishes, 1 and 2
// follow the H100 shard, 3 the A100 shard, 4 the whole topic, and 5
// validates nothing and relays an H100 offer on the A100 shard. Over
// QUIC and TCP.
func TestOffersTravelOnTheirFamilysShard(t *testing.T) {
	for _, tc := range gossipTransports(t) {
		t.Run(tc.name, func(t *testing.T) {
			s := p2ptest.NewLoopback(t, 6, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			validators := make([]*p2p.MarketValidator, 5)
			for i := range 5 {
				seqs, err := p2p.OpenSeqGuard(ctx, dssync.MutexWrap(ds.NewMapDatastore()))
				if err != nil {
					t.Fatal(err)
				}
				validators[i] = p2p.NewMarketValidator(market.DefaultLimits(), seqs, time.Now, nil)
				if err := validators[i].Install(s.Nodes[i].Gossip); err != nil {
					t.Fatal(err)
				}
			}
			got := &received{ids: map[int][]string{}}
			follow := map[int]string{1: "h100", 2: "h100", 3: "a100"}
			for i, shard := range follow {
				topic, err := s.Nodes[i].Gossip.JoinShard(p2p.TopicOffers, shard)
				if err != nil {
					t.Fatal(err)
				}
				sub, err := topic.Subscribe()
				if err != nil {
					t.Fatal(err)
				}
				got.drain(ctx, &wg, i, sub)
			}
			whole, err := s.Nodes[4].Gossip.Topic(p2p.TopicOffers).Subscribe()
			if err != nil {
				t.Fatal(err)
			}
			got.drain(ctx, &wg, 4, whole)
			waitUntil(t, 30*time.Second, "node 0 knows the shards' followers", func() bool {
				return len(s.Nodes[0].Gossip.ShardPeers(p2p.TopicOffers, "h100")) == 2 &&
					len(s.Nodes[0].Gossip.ShardPeers(p2p.TopicOffers, "a100")) == 1
			})
			if err := s.WaitMesh(ctx, p2p.TopicOffers); err != nil {
				t.Fatal(err)
			}

			prov := newSigner(t, s.Nodes[0].Host.Peerstore().PrivKey(s.Nodes[0].Host.ID()))
			h100, a100 := gpuOffer(t, prov, "h100s", "H100 SXM"), gpuOffer(t, prov, "a100s", "A100 SXM 80GB")
			for _, env := range [][]byte{h100, a100} {
				o, _ := market.Open[*pb.Offer](env)
				if err := s.Nodes[0].Gossip.PublishOnShards(ctx, p2p.TopicOffers, p2p.OfferShards(o), env); err != nil {
					t.Fatal(err)
				}
				if err := s.Nodes[0].Gossip.Topic(p2p.TopicOffers).Publish(ctx, env); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, 20*time.Second, "each follower has its shard's offer, the whole topic's follower both", func() bool {
				return slices.Equal(got.of(1), []string{"h100s"}) && slices.Equal(got.of(2), []string{"h100s"}) &&
					slices.Equal(got.of(3), []string{"a100s"}) && len(got.of(4)) == 2
			})

			// Node 5 relays the H100 offer on the A100 shard: node 3 rejects it.
			wrong, err := s.Nodes[5].Gossip.JoinShard(p2p.TopicOffers, "a100")
			if err != nil {
				t.Fatal(err)
			}
			if err := wrong.Publish(ctx, h100); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 20*time.Second, "node 3 rejects an H100 offer on the A100 shard", func() bool {
				n := int64(0)
				validators[3].EachVerdict(func(topic, verdict, reason string, c int64) {
					if topic == p2p.TopicOffers && reason == p2p.ReasonWrongShard {
						n = c
					}
				})
				return n == 1
			})
			if ids := got.of(3); !slices.Equal(ids, []string{"a100s"}) {
				t.Errorf("node 3, following the A100 shard, got %v", ids)
			}

			// An offer of a GPU the catalog lacks, on the H100 shard: a
			// newer catalog may put it there, so the followers ignore it
			// rather than reject it.
			h100shard, err := s.Nodes[5].Gossip.JoinShard(p2p.TopicOffers, "h100")
			if err != nil {
				t.Fatal(err)
			}
			if err := h100shard.Publish(ctx, gpuOffer(t, prov, "widgets", "Quantum Widget 9")); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 20*time.Second, "nodes 1 and 2 ignore an offer of an unknown GPU on the H100 shard", func() bool {
				for _, i := range []int{1, 2} {
					n := int64(0)
					validators[i].EachVerdict(func(topic, verdict, reason string, c int64) {
						if topic == p2p.TopicOffers && reason == p2p.ReasonUnknownShard && verdict == p2p.VerdictIgnore {
							n = c
						}
					})
					if n != 1 {
						return false
					}
				}
				return true
			})
			for _, i := range []int{1, 2} {
				if ids := got.of(i); !slices.Equal(ids, []string{"h100s"}) {
					t.Errorf("node %d, following the H100 shard, got %v", i, ids)
				}
			}
		})
	}
}

// A node joins at most p2p.MaxShards shards of a kind, each one its
// catalog names (p2p.KnownShards), and only of a sharded kind.
func TestJoinShardIsBounded(t *testing.T) {
	s := p2ptest.NewLoopback(t, 1)
	g := s.Nodes[0].Gossip
	known := p2p.KnownShards()
	if len(known) <= p2p.MaxShards {
		t.Fatalf("the catalog names %d shards, too few to pass the bound", len(known))
	}
	if _, err := g.JoinShard(p2p.TopicOffers, "x9000"); err == nil {
		t.Error("a shard the catalog does not name was joined")
	}
	for i, sh := range known[:p2p.MaxShards] {
		if _, err := g.JoinShard(p2p.TopicOffers, sh); err != nil {
			t.Fatalf("shard %d of %d: %v", i+1, p2p.MaxShards, err)
		}
	}
	if _, err := g.JoinShard(p2p.TopicOffers, known[0]); err != nil {
		t.Errorf("joining a joined shard again: %v", err)
	}
	if _, err := g.JoinShard(p2p.TopicOffers, "h-100"); err == nil {
		t.Error("a shard name with a '-' was joined")
	}
	if _, err := g.JoinShard(p2p.TopicOffers, known[p2p.MaxShards]); err == nil || !strings.Contains(err.Error(), "the most it may") {
		t.Errorf("shard %d: %v, want refused", p2p.MaxShards+1, err)
	}
	if _, err := g.JoinShard(p2p.TopicBids, known[p2p.MaxShards]); err != nil {
		t.Errorf("the bids kind has shards of its own: %v", err)
	}
	if _, err := g.JoinShard(p2p.TopicEvidence, "h100"); err == nil {
		t.Error("evidence, which is not sharded, joined a shard")
	}
}
