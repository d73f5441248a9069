package p2p_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	pebbleds "github.com/ipfs/go-ds-pebble"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// signer issues offers for one provider, with a key of its own.
type signer struct {
	key crypto.PrivKey
	id  peer.ID
}

func newSigner(t testing.TB, key crypto.PrivKey) signer {
	if key == nil {
		var err error
		if key, _, err = crypto.GenerateEd25519Key(nil); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := peer.IDFromPrivateKey(key)
	return signer{key, id}
}

func (s signer) offer(t testing.TB, name string, seq uint64, now time.Time) []byte {
	env, err := s.sign(name, seq, now)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// sign is offer for a goroutine other than the test's.
func (s signer) sign(name string, seq uint64, now time.Time) ([]byte, error) {
	o := &pb.Offer{
		Header: &pb.Header{Version: market.Version, Issuer: []byte(s.id), Id: name, Seq: seq,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpus:     []*pb.GPUGroup{{Model: "A100", Count: 4, VramBytes: 80 << 30, ComputeCapability: 80}},
		Region:   &pb.Region{Country: "DE"},
		Currency: "USD", PriceMicros: 1_500_000, MinDurationSeconds: 60, MaxDurationSeconds: 3600,
		Tiers: []pb.Tier{pb.Tier_TIER_SILVER},
	}
	return market.Sign(s.key, o)
}

// marketNode is a harness node with the market validator and a book fed
// by its offers subscription.
type marketNode struct {
	*p2ptest.Node
	validator *p2p.MarketValidator
	book      *market.Book
}

func withMarket(t testing.TB, s *p2ptest.Swarm, skip map[int]bool) []*marketNode {
	t.Helper()
	nodes, _ := startMarket(t, s, skip)
	return nodes
}

// startMarket is withMarket for a caller that closes s before its test
// ends: it calls stop, which ends the book readers, first (the test's
// cleanup calls it too).
func startMarket(t testing.TB, s *p2ptest.Swarm, skip map[int]bool) (nodes []*marketNode, stop func()) {
	t.Helper()
	return marketOn(t, s, skip, false)
}

// marketOn is startMarket; with ownOnly each node vouches for its own key
// alone, not for connected peers in good standing.
func marketOn(t testing.TB, s *p2ptest.Swarm, skip map[int]bool, ownOnly bool) (nodes []*marketNode, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	var out []*marketNode
	for i, nd := range s.Nodes {
		mn := &marketNode{Node: nd, book: market.NewBook()}
		out = append(out, mn)
		if skip[i] {
			continue // this node validates nothing: it can publish forgeries
		}
		seqs, err := p2p.OpenSeqGuard(ctx, dssync.MutexWrap(ds.NewMapDatastore()))
		if err != nil {
			t.Fatal(err)
		}
		// The validator, book and guard hold their limits as a node's do:
		// a connected peer in good standing outranks a stranger.
		h := nd.Host
		var v *p2p.MarketValidator
		rank := func(p peer.ID) int {
			switch {
			case p == h.ID():
				return market.RankOwn
			case !ownOnly && len(h.Network().ConnsToPeer(p)) > 0 && v.AppScore(p) > -1:
				return market.RankKnown
			}
			return market.RankUnknown
		}
		vouched := func(p peer.ID) bool { return rank(p) > market.RankUnknown }
		v = p2p.NewMarketValidator(market.DefaultLimits(), seqs, time.Now, nil).WithVouched(vouched)
		mn.validator = v
		if err := v.Install(nd.Gossip); err != nil {
			t.Fatal(err)
		}
		limits := market.DefaultBookLimits()
		mn.book.SetLimits(limits, rank, nil)
		seqs.SetLimit(p2p.TopicOffers, limits.Offers, vouched)
		sub, err := nd.Gossip.Topic(p2p.TopicOffers).Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Cancel()
			for {
				msg, err := sub.Next(ctx)
				if err != nil {
					return
				}
				mn.book.PutOffer(msg.ValidatorData.(*pb.Offer), time.Now())
			}
		}()
	}
	return out, stop
}

func waitUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOffersReachEveryBookOnTenNodes(t *testing.T) {
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	s := p2ptest.NewMocknet(t, 10, p2ptest.WithLatency(m, 20))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := withMarket(t, s, nil)
	if err := s.WaitMesh(ctx, p2p.TopicOffers); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, i := range []int{2, 5, 8} {
		prov := newSigner(t, s.Nodes[i].Host.Peerstore().PrivKey(s.Nodes[i].Host.ID()))
		if err := s.Nodes[i].Gossip.Topic(p2p.TopicOffers).Publish(ctx, prov.offer(t, "gpus", 1, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 2*time.Second, "every book holds the 3 offers", func() bool {
		for _, n := range nodes {
			if len(n.book.Snapshot().Offers()) != 3 {
				return false
			}
		}
		return true
	})
	t.Logf("10 books converged on 3 offers in %s (PlanetLab latencies)", time.Since(start).Round(time.Millisecond))
}

func TestForgedOfferIsRejectedAndCostsTheSenderScore(t *testing.T) {
	s := p2ptest.NewLoopback(t, 4)
	nodes := withMarket(t, s, map[int]bool{3: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitMesh(ctx, p2p.TopicOffers); err != nil {
		t.Fatal(err)
	}
	attacker := s.Nodes[3]
	victim := newSigner(t, nil)
	forger := newSigner(t, attacker.Host.Peerstore().PrivKey(attacker.Host.ID()))
	env := forger.offer(t, "gpus", 1, time.Now())
	// Claim the victim's identity in the header while keeping the forger's
	// signature: what an attacker would send to pass an offer as another's.
	o, _ := market.Open[*pb.Offer](env)
	o.Header.Issuer = []byte(victim.id)
	forged := resign(t, forger.key, o)
	for i := range 5 {
		if err := attacker.Gossip.Topic(p2p.TopicOffers).Publish(ctx, append(forged, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes[:3] {
		waitUntil(t, 10*time.Second, "an honest node rejects the forgeries and scores the attacker below zero", func() bool {
			score, ok := n.Gossip.Score(attacker.Host.ID())
			return n.validator.Rejected.Load() > 0 && ok && score < 0
		})
		if len(n.book.Snapshot().Offers()) != 0 {
			t.Errorf("node %d's book took a forged offer", i)
		}
	}
}

func TestReplayedSequenceIsIgnoredAlsoAfterRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ds")
	prov := newSigner(t, nil)
	now := time.Now()
	ctx := context.Background()
	var guard *p2p.SeqGuard
	open := func() (*pebbleds.Datastore, *p2p.MarketValidator) {
		store, err := pebbleds.NewDatastore(dir)
		if err != nil {
			t.Fatal(err)
		}
		if guard, err = p2p.OpenSeqGuard(ctx, store); err != nil {
			t.Fatal(err)
		}
		return store, p2p.NewMarketValidator(market.DefaultLimits(), guard, func() time.Time { return now }, nil)
	}
	store, v := open()
	check := func(env []byte, want pubsub.ValidationResult, what string) {
		t.Helper()
		if _, got := v.CheckOffer(ctx, env); got != want {
			t.Errorf("%s: verdict %v, want %v", what, got, want)
		}
	}
	seq5 := prov.offer(t, "gpus", 5, now)
	check(seq5, pubsub.ValidationAccept, "first offer")
	check(seq5, pubsub.ValidationIgnore, "the same offer again")
	check(prov.offer(t, "gpus", 3, now), pubsub.ValidationIgnore, "an older sequence")
	check(prov.offer(t, "other", 1, now), pubsub.ValidationAccept, "another offer ID of the issuer")
	if err := guard.Flush(ctx); err != nil { // what a closing node does
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store, v = open()
	defer store.Close()
	check(seq5, pubsub.ValidationIgnore, "the old offer replayed after a restart")
	check(prov.offer(t, "gpus", 4, now), pubsub.ValidationIgnore, "an older sequence after a restart")
	if _, got := v.CheckSyncedOffer(ctx, seq5); got != pubsub.ValidationAccept {
		t.Errorf("the held offer handed back by book sync after a restart: %v, want accept", got)
	}
	if _, got := v.CheckSyncedOffer(ctx, prov.offer(t, "gpus", 4, now)); got != pubsub.ValidationIgnore {
		t.Errorf("an older sequence by book sync: %v, want ignore", got)
	}
	check(prov.offer(t, "gpus", 6, now), pubsub.ValidationAccept, "a newer sequence after a restart")
	check([]byte("garbage"), pubsub.ValidationReject, "garbage")
	expired := prov.offer(t, "late", 1, now.Add(-2*time.Hour))
	check(expired, pubsub.ValidationIgnore, "an expired offer")

	// Records of expired messages are pruned; a replay of such a message
	// is refused as expired all the same.
	if err := guard.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	guard, err := p2p.OpenSeqGuard(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if n := guard.Prune(now.Add(2 * time.Hour).UnixMilli()); n != 2 {
		t.Errorf("Prune dropped %d records, want the 2 of gpus and other", n)
	}
	if err := guard.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := p2p.OpenSeqGuard(ctx, store); err != nil || again.Prune(now.Add(2*time.Hour).UnixMilli()) != 0 {
		t.Errorf("pruned records came back from the datastore (%v)", err)
	}
	v2 := p2p.NewMarketValidator(market.DefaultLimits(), guard, func() time.Time { return now.Add(2 * time.Hour) }, nil)
	if _, got := v2.CheckOffer(ctx, seq5); got != pubsub.ValidationIgnore {
		t.Errorf("a pruned, expired offer replayed: %v, want ignore", got)
	}
}

// resign signs o with key without market.Sign's issuer check.
func resign(t *testing.T, key crypto.PrivKey, o *pb.Offer) []byte {
	t.Helper()
	env, err := record.Seal(offerRecord{o}, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// offerRecord is market's offer record, rebuilt here as a forger would.
type offerRecord struct{ o *pb.Offer }

func (r offerRecord) Domain() string                 { return market.OfferDomain }
func (r offerRecord) Codec() []byte                  { return []byte("/idlegrid/offer/1") }
func (r offerRecord) MarshalRecord() ([]byte, error) { return proto.Marshal(r.o) }
func (r offerRecord) UnmarshalRecord([]byte) error   { return nil }

// offenderSet records the offenders a node's evidence subscription saw.
type offenderSet struct {
	mu  sync.Mutex
	set map[peer.ID]bool
}

func (o *offenderSet) Excluded(p peer.ID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.set[p]
}

func TestEvidenceThatProvesReachesEveryNodeAndAClaimDoesNot(t *testing.T) {
	m, err := p2ptest.PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	s := p2ptest.NewMocknet(t, 10, p2ptest.WithLatency(m, 40))
	nodes := withMarket(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitMesh(ctx, p2p.TopicOffers, p2p.TopicEvidence); err != nil {
		t.Fatal(err)
	}
	sets := make([]*offenderSet, len(nodes))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, n := range nodes {
		sets[i] = &offenderSet{set: map[peer.ID]bool{}}
		sub, err := n.Gossip.Topic(p2p.TopicEvidence).Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Cancel()
			for {
				msg, err := sub.Next(ctx)
				if err != nil {
					return
				}
				sets[i].mu.Lock()
				for _, p := range msg.ValidatorData.([]peer.ID) {
					sets[i].set[p] = true
				}
				sets[i].mu.Unlock()
			}
		}()
	}

	cheatHost := s.Nodes[3].Host
	cheat := newSigner(t, cheatHost.Peerstore().PrivKey(cheatHost.ID()))
	if err := s.Nodes[3].Gossip.Topic(p2p.TopicOffers).Publish(ctx, cheat.offer(t, "gpus", 1, time.Now())); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "every book holds the offer", func() bool {
		for _, n := range nodes {
			if len(n.book.Snapshot().Offers()) != 1 {
				return false
			}
		}
		return true
	})

	// Another peer's document claiming the cheat's GPU-1 proves nothing
	// (issue 11, attack 1: it excluded both): a node without CC roots
	// ignores it, so it goes nowhere and no one is excluded.
	now := time.Now()
	otherHost := s.Nodes[5].Host
	other := newSigner(t, otherHost.Peerstore().PrivKey(otherHost.ID()))
	framing, _ := attest.NewEvidence(signDoc(t, cheat, now, "GPU-1", "GPU-2"), signDoc(t, other, now.Add(5*time.Second), "GPU-1", "GPU-7"))
	ignored := nodes[0].validator.Ignored.Load()
	s.Nodes[0].Gossip.Topic(p2p.TopicEvidence).Publish(ctx, framing)
	if nodes[0].validator.Ignored.Load() != ignored+1 {
		t.Error("a UUID two peers name was not ignored")
	}

	// The cheat signed two documents seconds apart with different GPUs:
	// that proves it, and it alone, an offender.
	ev, _ := attest.NewEvidence(signDoc(t, cheat, now, "GPU-1", "GPU-2"), signDoc(t, cheat, now.Add(5*time.Second), "GPU-1", "GPU-7"))
	if err := s.Nodes[0].Gossip.Topic(p2p.TopicEvidence).Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	bid := &pb.Bid{Header: &pb.Header{Version: 1, Issuer: []byte(s.Nodes[0].Host.ID()), Id: "b", Seq: 1, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli()},
		Gpu: &pb.GPURequirement{Count: 1}, Tier: pb.Tier_TIER_SILVER, Currency: "USD", MaxPriceMicros: 5_000_000, DurationSeconds: 600}
	waitUntil(t, 5*time.Second, "every node records the offender and excludes it from its matches", func() bool {
		for i, n := range nodes {
			if !sets[i].Excluded(cheatHost.ID()) {
				return false
			}
			matcher := market.NewMatcher(market.DefaultMatchConfig(), nil, nil).WithExcluder(sets[i])
			if res := matcher.Match(n.book.Snapshot(), bid, time.Now(), 5); len(res.Candidates) != 0 {
				return false
			}
		}
		return true
	})
	for i := range nodes {
		if sets[i].Excluded(otherHost.ID()) {
			t.Errorf("node %d excludes a peer nothing proves an offender", i)
		}
	}

	// Evidence that proves nothing is rejected, already by the validator of
	// the node that tries to publish it.
	before := nodes[9].validator.Rejected.Load()
	doc := signDoc(t, cheat, now, "GPU-1")
	junk, _ := attest.NewEvidence(doc, doc)
	if err := s.Nodes[9].Gossip.Topic(p2p.TopicEvidence).Publish(ctx, junk); err == nil {
		t.Error("evidence that proves nothing was published")
	}
	if nodes[9].validator.Rejected.Load() != before+1 {
		t.Error("the validator did not reject evidence that proves nothing")
	}
}

func signDoc(t *testing.T, s signer, at time.Time, uuids ...string) []byte {
	t.Helper()
	d := attest.NewDocument(attest.Inventory{}, s.id, attest.Challenge{Nonce: make([]byte, attest.NonceSize)}, at, nil)
	for _, u := range uuids {
		d.Gpus = append(d.Gpus, &attestpb.GPUFingerprint{Uuid: u})
	}
	env, err := attest.SignDocument(s.key, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}
