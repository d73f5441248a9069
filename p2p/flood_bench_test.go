package p2p_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// The swarm of BenchmarkHonestOffersUnderFlood: floodNodes honest nodes
// on loopback TCP and floodAttackers attacker hosts, each connected to
// the victims only and checking nothing it sends; the first
// floodPublishers honest nodes publish floodHonest honest offers.
const (
	floodNodes       = 10
	floodAttackers   = 2
	floodPublishers  = 10
	floodHonest      = 100
	floodKeys        = 50                    // the attack's free keys
	floodRate        = 9_200                 // offers a second, all attackers together: issue 11's 230k in 25 s
	floodLeadIgnored = 1_000                 // flood offers each victim ignored before honest ones go out
	floodHonestGap   = 50 * time.Millisecond // between honest offers
	floodDeliver     = 15 * time.Second      // after the last honest offer
)

// floodVictims are the honest nodes every attacker is connected to: each
// takes the whole flood, as issue 11's victim did.
var floodVictims = []int{0, 5}

// floodRun is what one run of the swarm measured.
type floodRun struct {
	delivered, want int             // honest (offer, node) arrivals, and how many there should be
	latencies       []time.Duration // of those that arrived
	heap, rss       float64         // bytes in use after a GC, and the process's RSS, at the end
	flooded         int             // spam offers the attackers published
	floodFor        time.Duration
}

// BenchmarkHonestOffersUnderFlood measures what issue 11's flood (attack
// 5: valid offers of 50 free keys at 9,200 a second) costs honest offers,
// against the same swarm without it, in one run: the share of honest
// offers delivered to every honest node, their p99 delivery latency and
// its ratio to the calm run's, and what the flood adds to the heap in use
// and to the RSS of the process, which holds all ten honest nodes and the
// attackers. Two attackers, each with half the keys, send 4,600 offers a
// second each to both victims (nodes 0 and 5), so each victim takes
// 9,200 a second; the rest of the swarm sees what the victims relay.
//
// Loopback TCP rather than mocknet: a mocknet stream with latency takes
// one write of 256 bytes or more per one-way delay, so a link carries a
// few tens of messages a second and any relayed load queues for seconds,
// which no TCP connection does.
//
//	go test ./p2p -run '^$' -bench HonestOffersUnderFlood -benchtime 1x
func BenchmarkHonestOffersUnderFlood(b *testing.B) {
	spam := floodSpam(b)
	for range b.N {
		calm := runFloodSwarm(b, nil)
		flood := runFloodSwarm(b, spam)
		p99c, p99f := percentile(calm.latencies, 99), percentile(flood.latencies, 99)
		b.ReportMetric(100*float64(calm.delivered)/float64(calm.want), "calm-delivered-%")
		b.ReportMetric(100*float64(flood.delivered)/float64(flood.want), "flood-delivered-%")
		b.ReportMetric(ms(p99c), "calm-p99-ms")
		b.ReportMetric(ms(p99f), "flood-p99-ms")
		b.ReportMetric(float64(p99f)/float64(p99c), "p99-ratio")
		b.ReportMetric((flood.heap-calm.heap)/(1<<20), "heap-delta-MB")
		b.ReportMetric((flood.rss-calm.rss)/(1<<20), "rss-delta-MB")
		b.ReportMetric(float64(flood.flooded)/flood.floodFor.Seconds(), "flood-offers/s")
	}
}

// floodSpam signs the flood: offers of floodKeys fresh keys, enough for
// floodRate over the whole run.
func floodSpam(b *testing.B) [][]byte {
	perKey := int(float64(floodRate)*(5*time.Second+floodHonest*floodHonestGap+floodDeliver).Seconds())/floodKeys + 1
	return floodSpamOf(b, floodKeys, perKey)
}

// floodSpamOf signs perKey offers, each under an ID of its own, for each
// of keys fresh keys, the keys interleaved as many attackers' offers
// would arrive.
func floodSpamOf(t testing.TB, keys, perKey int) [][]byte {
	out := make([][]byte, keys*perKey)
	errs := make([]error, keys)
	now := time.Now()
	var wg sync.WaitGroup
	for k := range keys {
		s := newSigner(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perKey {
				if out[i*keys+k], errs[k] = s.sign(fmt.Sprint("spam-", i), 1, now); errs[k] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// runFloodSwarm builds the swarm, publishes the honest offers (during the
// flood of spam, if any) and waits until every honest node holds them or
// floodDeliver has passed since the last.
func runFloodSwarm(b *testing.B, spam [][]byte) floodRun {
	s := p2ptest.NewLoopback(b, floodNodes)
	defer s.Close()
	nodes, stopMarket := startMarket(b, s, nil)
	defer stopMarket()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := s.WaitMesh(wctx, p2p.TopicOffers); err != nil {
		b.Fatal(err)
	}
	var attackers []*rawAttacker
	if spam != nil {
		for range floodAttackers {
			attackers = append(attackers, newRawAttacker(wctx, b, s, floodVictims))
		}
	}

	// Each honest node notes when each honest offer arrives.
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	arrivals := watchHonest(ctx, b, s, floodNodes, &readers)

	var run floodRun
	var flooding sync.WaitGroup
	floodStart := time.Now()
	if spam != nil {
		flooding.Add(floodAttackers)
		for a, at := range attackers {
			mine := spam[a*len(spam)/floodAttackers : (a+1)*len(spam)/floodAttackers]
			go func() {
				defer flooding.Done()
				sent := floodAt(ctx, at.publish, mine, floodRate/floodAttackers, 10*time.Millisecond)
				arrivals.mu.Lock()
				run.flooded += sent
				arrivals.mu.Unlock()
			}()
		}
		// Honest offers go out once the flood has spent both victims' budget
		// for the attackers, and the attackers' score, many times over.
		for _, v := range floodVictims {
			waitUntil(b, 30*time.Second, fmt.Sprintf("victim %d meets the flood", v), func() bool {
				return nodes[v].validator.Ignored.Load() > floodLeadIgnored
			})
		}
	}

	now := time.Now()
	pace := time.NewTicker(floodHonestGap)
	for n := range floodHonest {
		i := n % floodPublishers
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
	run.want = floodHonest * (floodNodes - 1)
	select { // every honest offer everywhere, or the time is up
	case <-arrivals.expect(run.want):
	case <-time.After(floodDeliver):
	}
	run.floodFor = time.Since(floodStart)
	run.heap, run.rss = memoryInUse()
	cancel()
	flooding.Wait()
	run.delivered, run.latencies = arrivals.result()
	return run
}

// attacker starts an attacker's host: gossipsub on the swarm's topics,
// with no validator, so it publishes whatever it is handed, connected to
// the victims and to no one else; it runs until ctx ends, and waits for
// its peers until wctx does. It returns the offers topic once both
// victims are its peers there, and its peer ID.
func attacker(ctx, wctx context.Context, b testing.TB, s *p2ptest.Swarm, victims []int) (*pubsub.Topic, peer.ID) {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	g, err := p2p.NewGossip(ctx, h, p2p.GossipConfig{Swarm: p2p.Swarm{Name: p2ptest.DefaultSwarmName},
		OutboundQueue: 4096, MaxMessageSize: 1 << 20, ValidatorTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	for _, v := range victims {
		nd := s.Nodes[v]
		if err := h.Connect(wctx, peer.AddrInfo{ID: nd.Host.ID(), Addrs: nd.Host.Addrs()}); err != nil {
			b.Fatal(err)
		}
	}
	topic := g.Topic(p2p.TopicOffers)
	for len(topic.ListPeers()) < len(victims) {
		select {
		case <-wctx.Done():
			b.Fatalf("the victims did not join the attacker's offers topic: %v", wctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return topic, h.ID()
}

// rawAttacker is an attacker's host that speaks gossipsub only to send:
// it opens a stream to each victim and writes RPCs of whatever it is
// handed, one message each, and never answers the victims' own streams,
// so their routers never score it. It costs the attacker a write per
// message, not a router's work, so in one process the victims' cost is
// what a flood costs them.
type rawAttacker struct {
	id      peer.ID
	topic   string
	streams []network.Stream
}

func newRawAttacker(ctx context.Context, t testing.TB, s *p2ptest.Swarm, victims []int) *rawAttacker {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	a := &rawAttacker{id: h.ID(), topic: p2p.Swarm{Name: p2ptest.DefaultSwarmName}.Topic(p2p.TopicOffers)}
	for _, v := range victims {
		nd := s.Nodes[v]
		if err := h.Connect(ctx, peer.AddrInfo{ID: nd.Host.ID(), Addrs: nd.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		st, err := h.NewStream(ctx, nd.Host.ID(), pubsub.GossipSubID_v11)
		if err != nil {
			t.Fatal(err)
		}
		a.streams = append(a.streams, st)
	}
	return a
}

// publish writes msg to every victim, in an RPC of its own.
func (a *rawAttacker) publish(msg []byte) error {
	rpc, err := proto.Marshal(&pubsubpb.RPC{Publish: []*pubsubpb.Message{{Data: msg, Topic: &a.topic}}})
	if err != nil {
		return err
	}
	frame := binary.AppendUvarint(nil, uint64(len(rpc)))
	frame = append(frame, rpc...)
	for _, st := range a.streams {
		if _, err := st.Write(frame); err != nil {
			return err
		}
	}
	return nil
}

// floodAt publishes msgs at rate a second, a step's worth (at least one)
// each step, until they run out, publish fails or ctx ends; it returns
// how many it published.
func floodAt(ctx context.Context, publish func([]byte) error, msgs [][]byte, rate int, step time.Duration) int {
	perStep := max(rate*int(step)/int(time.Second), 1)
	tick := time.NewTicker(step)
	defer tick.Stop()
	sent := 0
	for sent < len(msgs) {
		for range min(perStep, len(msgs)-sent) {
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

// arrivalLog records when each honest offer was published, by which
// node, and when it reached each other node.
type arrivalLog struct {
	mu     sync.Mutex
	sentAt map[string]time.Time
	sentBy map[string]int
	got    map[string]map[int]time.Time
	count  int           // arrivals recorded
	want   int           // arrivals that close all; 0: not set yet
	all    chan struct{} // closed once want have arrived
}

// watchHonest notes when each honest offer (ID "honest-…") arrives at
// each of the first n nodes of s, until ctx ends; readers counts the
// goroutines that read, for the caller to wait on.
func watchHonest(ctx context.Context, b *testing.B, s *p2ptest.Swarm, n int, readers *sync.WaitGroup) *arrivalLog {
	arrivals := newArrivalLog()
	for i := range n {
		sub, err := s.Nodes[i].Gossip.Topic(p2p.TopicOffers).Subscribe(pubsub.WithBufferSize(1 << 14))
		if err != nil {
			b.Fatal(err)
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer sub.Cancel()
			for {
				msg, err := sub.Next(ctx)
				if err != nil {
					return
				}
				if o, ok := msg.ValidatorData.(*pb.Offer); ok && strings.HasPrefix(o.Header.Id, "honest-") {
					arrivals.arrived(i, o.Header.Id, time.Now())
				}
			}
		}()
	}
	return arrivals
}

func newArrivalLog() *arrivalLog {
	return &arrivalLog{sentAt: map[string]time.Time{}, sentBy: map[string]int{}, got: map[string]map[int]time.Time{}, all: make(chan struct{})}
}

// expect sets how many arrivals make the whole; all is closed when they
// have come.
func (l *arrivalLog) expect(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.want = n
	l.settle()
	return l.all
}

func (l *arrivalLog) settle() {
	if l.want > 0 && l.count >= l.want {
		select {
		case <-l.all:
		default:
			close(l.all)
		}
	}
}

func (l *arrivalLog) published(id string, by int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sentAt[id], l.sentBy[id], l.got[id] = at, by, map[int]time.Time{}
}

func (l *arrivalLog) arrived(node int, id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if got, ok := l.got[id]; ok && node != l.sentBy[id] {
		if _, dup := got[node]; !dup {
			got[node] = at
			l.count++
			l.settle()
		}
	}
}

func (l *arrivalLog) result() (int, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lat []time.Duration
	for id, got := range l.got {
		for _, at := range got {
			lat = append(lat, at.Sub(l.sentAt[id]))
		}
	}
	return len(lat), lat
}

// percentile returns the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// memoryInUse returns the heap in use after a collection and the
// process's resident set (0 where /proc is not there).
func memoryInUse() (heap, rss float64) {
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	n, err := p2ptest.ResidentSet()
	if err != nil {
		return float64(st.HeapInuse), 0
	}
	return float64(st.HeapInuse), float64(n)
}
