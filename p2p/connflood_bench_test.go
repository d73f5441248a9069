package p2p_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// The swarm of BenchmarkHonestOffersUnderConnectedFlood: connNodes
// honest nodes on loopback TCP, each vouching for its own key only (a
// connection is not trust), and connAttackers attacker hosts, each with
// a key of its own, connected to the victim (node 0) only, each flooding
// its own offers at connRate a second, within the victim's budget for a
// relay. connPublishers honest nodes publish connHonest offers, one each
// connHonestGap: the rate of a swarm of ten thousand providers.
const (
	connNodes      = 10
	connAttackers  = 100 // issue 26, attack 9: a hundred connections, one per key
	connRate       = 40  // offers a second, each attacker (a relay may send 50)
	connHonest     = 40
	connHonestGap  = 250 * time.Millisecond
	connDeliver    = 15 * time.Second // after the last honest offer
	connLeadIgnore = 1_000            // flood offers the victim ignored before honest ones go out
)

// BenchmarkHonestOffersUnderConnectedFlood measures what issue 26's
// attack 9 (a hundred connections, one per key, each flooding its own
// valid offers) costs honest offers, against the same swarm without it,
// in one run: the share of honest offers delivered to every honest node
// and to the victim, their p99 delivery latency and its ratio to the
// calm run's, what the flood adds to the process's RSS and heap (all ten
// honest nodes and the hundred attackers' hosts, which are there, idle,
// in the calm run too), and how many offers the victim took a second
// (its strangers' budget allows 25).
//
//	go test ./p2p -run '^$' -bench HonestOffersUnderConnectedFlood -benchtime 1x
func BenchmarkHonestOffersUnderConnectedFlood(b *testing.B) {
	keys := make([]crypto.PrivKey, connAttackers)
	for i := range keys {
		keys[i], _, _ = crypto.GenerateEd25519Key(nil)
	}
	perKey := int(float64(connRate) * (10*time.Second + connHonest*connHonestGap + connDeliver).Seconds())
	spam := make([][][]byte, connAttackers)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() { defer wg.Done(); spam[k] = ownOffers(b, keys[k], perKey) }()
	}
	wg.Wait()
	for range b.N {
		calm := runConnFlood(b, keys, nil)
		flood := runConnFlood(b, keys, spam)
		p99c, p99f := percentile(calm.latencies, 99), percentile(flood.latencies, 99)
		b.ReportMetric(100*float64(calm.delivered)/float64(calm.want), "calm-delivered-%")
		b.ReportMetric(100*float64(flood.delivered)/float64(flood.want), "flood-delivered-%")
		b.ReportMetric(100*float64(flood.atVictim)/connHonest, "flood-victim-delivered-%")
		b.ReportMetric(ms(p99c), "calm-p99-ms")
		b.ReportMetric(ms(p99f), "flood-p99-ms")
		b.ReportMetric(float64(p99f)/float64(p99c), "p99-ratio")
		b.ReportMetric((flood.rss-calm.rss)/(1<<20), "rss-delta-MB")
		b.ReportMetric((flood.heap-calm.heap)/(1<<20), "heap-delta-MB")
		b.ReportMetric(float64(flood.flooded)/flood.floodFor.Seconds(), "flood-offers/s")
		b.ReportMetric(float64(flood.victimTook)/flood.floodFor.Seconds(), "victim-took/s")
	}
}

// connRun is floodRun with what the victim took of the flood and how
// many honest offers reached it.
type connRun struct {
	floodRun
	atVictim   int
	victimTook int64
}

// ownOffers signs n offers of key, under its cap of IDs in turn, each
// with a higher seq.
func ownOffers(b testing.TB, key crypto.PrivKey, n int) [][]byte {
	s := newSigner(b, key)
	out := make([][]byte, n)
	now := time.Now()
	for i := range out {
		env, err := s.sign(fmt.Sprint("spam-", i%p2p.IssuerCaps[p2p.TopicOffers]), uint64(i+1), now)
		if err != nil {
			b.Error(err)
			return nil
		}
		out[i] = env
	}
	return out
}

// ownKeyMarket is startMarket with each node vouching for its own key
// only: what a node that has attested no one vouches for.
func ownKeyMarket(t testing.TB, s *p2ptest.Swarm) (nodes []*marketNode, stop func()) {
	t.Helper()
	return marketOn(t, s, nil, true)
}

// ownKeyPeer is an attacker's host with the key it floods with,
// connected to the victim, writing gossipsub RPCs and answering nothing.
type ownKeyPeer struct {
	s     network.Stream
	topic string
}

func newOwnKeyPeer(ctx context.Context, t testing.TB, key crypto.PrivKey, victim *p2ptest.Node) *ownKeyPeer {
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: victim.Host.ID(), Addrs: victim.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, victim.Host.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	return &ownKeyPeer{s: s, topic: p2p.Swarm{Name: p2ptest.DefaultSwarmName}.Topic(p2p.TopicOffers)}
}

func (a *ownKeyPeer) publish(msg []byte) error {
	rpc, err := proto.Marshal(&pubsubpb.RPC{Publish: []*pubsubpb.Message{{Data: msg, Topic: &a.topic}}})
	if err != nil {
		return err
	}
	_, err = a.s.Write(append(binary.AppendUvarint(nil, uint64(len(rpc))), rpc...))
	return err
}

// runConnFlood builds the swarm, publishes the honest offers (during the
// flood, if keys are given) and waits until every honest node holds them
// or connDeliver has passed since the last.
func runConnFlood(b *testing.B, keys []crypto.PrivKey, spam [][][]byte) connRun {
	s := p2ptest.NewLoopback(b, connNodes)
	defer s.Close()
	nodes, stopMarket := ownKeyMarket(b, s)
	defer stopMarket()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := s.WaitMesh(wctx, p2p.TopicOffers); err != nil {
		b.Fatal(err)
	}
	var attackers []*ownKeyPeer
	for _, k := range keys {
		attackers = append(attackers, newOwnKeyPeer(wctx, b, k, s.Nodes[0]))
	}

	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	arrivals := watchHonest(ctx, b, s, connNodes, &readers)

	var run connRun
	var flooding sync.WaitGroup
	victim := nodes[0].validator
	tookBefore := victim.Accepted.Load()
	floodStart := time.Now()
	for a, at := range attackers {
		if spam == nil {
			break // calm: the attackers' hosts are there, idle
		}
		flooding.Add(1)
		go func() {
			defer flooding.Done()
			sent := paced(ctx, at.publish, spam[a], connRate)
			arrivals.mu.Lock()
			run.flooded += sent
			arrivals.mu.Unlock()
		}()
	}
	if spam != nil {
		waitUntil(b, 30*time.Second, "the victim meets the flood", func() bool { return victim.Ignored.Load() > connLeadIgnore })
	}

	now := time.Now()
	pace := time.NewTicker(connHonestGap)
	for n := range connHonest {
		i := 1 + n%(connNodes-1) // every honest node but the victim
		prov := newSigner(b, s.Nodes[i].Host.Peerstore().PrivKey(s.Nodes[i].Host.ID()))
		id := fmt.Sprint("honest-", n)
		env := prov.offer(b, id, 1, now)
		arrivals.published(id, i, time.Now())
		if err := s.Nodes[i].Gossip.Topic(p2p.TopicOffers).Publish(ctx, env); err != nil {
			b.Fatal(err)
		}
		<-pace.C
	}
	pace.Stop()
	run.want = connHonest * (connNodes - 1)
	select {
	case <-arrivals.expect(run.want):
	case <-time.After(connDeliver):
	}
	run.floodFor = time.Since(floodStart)
	run.victimTook = victim.Accepted.Load() - tookBefore
	run.heap, run.rss = memoryInUse()
	cancel()
	flooding.Wait()
	run.delivered, run.latencies = arrivals.result()
	arrivals.mu.Lock()
	for _, got := range arrivals.got {
		if _, ok := got[0]; ok {
			run.atVictim++
		}
	}
	arrivals.mu.Unlock()
	return run
}

// paced publishes msgs at rate a second, a tenth of a second's worth at
// a time, until they run out, publish fails or ctx ends; it returns how
// many it published.
func paced(ctx context.Context, publish func([]byte) error, msgs [][]byte, rate int) int {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	for sent < len(msgs) {
		for range min(max(rate/10, 1), len(msgs)-sent) {
			if publish(msgs[sent]) != nil {
				return sent
			}
			sent++
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return sent
		}
	}
	return sent
}
