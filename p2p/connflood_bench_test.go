package p2p_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
)

// The swarm of BenchmarkHonestOffersUnderConnectedFlood: connNodes
// honest nodes on loopback, each vouching for its own key only (a
// connection is not trust), one of them the victim, and connAttackers
// attacker hosts, each with a key of its own, connected to the victim
// only, each flooding its own offers at connRate a second, within the
// victim's budget for a relay. The honest nodes but the victim publish
// connHonest offers, one each connHonestGap: the rate of a swarm of ten
// thousand providers.
const (
	connNodes      = 10
	connAttackers  = 100 // issue 26, attack 9: a hundred connections, one per key
	connRate       = 40  // offers a second, each attacker (a relay may send 50)
	connHonest     = 120
	connHonestGap  = 250 * time.Millisecond
	connDeliver    = 15 * time.Second // after the last honest offer
	connLeadIgnore = 1_000            // flood offers the victim ignored before honest ones go out
)

// BenchmarkHonestOffersUnderConnectedFlood measures what issue 26's
// attack 9 (a hundred connections, one per key, each flooding its own
// valid offers) costs honest offers, against the same swarm without it,
// in one run: the share of honest offers delivered to every honest node
// and to the victim; their p99 delivery latency and its ratio to the
// calm run's, over all arrivals, at the victim and at the other nodes;
// what the flood adds to the victim's RSS and heap and the CPU it used;
// and how many offers the victim took a second (its strangers' budget
// allows 25).
//
// Three processes, as three kinds of machine: this one runs the honest
// nodes but the victim; the victim runs in one of its own
// (connVictimEnv), so what it holds and spends is measured alone and its
// work takes no turns from the other nodes' goroutines; the attackers
// run in another (connFloodEnv), under SCHED_IDLE where chrt is there
// (else at nice 19), so their own sending takes as little as the kernel
// allows from the honest nodes on the same cores. The attackers' hosts
// connect in the calm run too, and stay idle.
//
//	go test ./p2p -run '^$' -bench HonestOffersUnderConnectedFlood -benchtime 1x
func BenchmarkHonestOffersUnderConnectedFlood(b *testing.B) {
	for range b.N {
		calm := runConnFlood(b, false)
		flood := runConnFlood(b, true)
		p99c, p99f := percentile(calm.latencies, 99), percentile(flood.latencies, 99)
		b.ReportMetric(100*float64(calm.delivered)/float64(calm.want), "calm-delivered-%")
		b.ReportMetric(100*float64(flood.delivered)/float64(flood.want), "flood-delivered-%")
		b.ReportMetric(100*float64(len(flood.atVictim))/connHonest, "flood-victim-delivered-%")
		b.ReportMetric(ms(p99c), "calm-p99-ms")
		b.ReportMetric(ms(p99f), "flood-p99-ms")
		b.ReportMetric(float64(p99f)/float64(p99c), "p99-ratio")
		b.ReportMetric(float64(percentile(flood.atVictim, 99))/float64(percentile(calm.atVictim, 99)), "victim-p99-ratio")
		b.ReportMetric(float64(percentile(flood.elsewhere, 99))/float64(percentile(calm.elsewhere, 99)), "elsewhere-p99-ratio")
		b.ReportMetric(100*flood.cpu.Seconds()/flood.floodFor.Seconds(), "victim-flood-cpu-%")
		b.ReportMetric(100*calm.cpu.Seconds()/calm.floodFor.Seconds(), "victim-calm-cpu-%")
		b.ReportMetric((flood.rss-calm.rss)/(1<<20), "rss-delta-MB")
		b.ReportMetric((flood.heap-calm.heap)/(1<<20), "heap-delta-MB")
		b.ReportMetric(float64(flood.flooded)/flood.floodFor.Seconds(), "flood-offers/s")
		b.ReportMetric(float64(flood.victimTook)/flood.floodFor.Seconds(), "victim-took/s")
		for _, r := range []connRun{calm, flood} {
			if len(r.missing) > 0 {
				b.Logf("not delivered: %s", strings.Join(r.missing, ", "))
			}
			b.Logf("slowest arrivals: %s", strings.Join(r.slowest, ", "))
		}
	}
}

// connRun is floodRun with what the victim took of the flood and the
// CPU it spent, floodRun.latencies split between the victim's arrivals
// and the other honest nodes', and which (offer, node) arrivals are
// missing and which were slowest.
type connRun struct {
	floodRun
	victimTook          int64
	cpu                 time.Duration // the victim's, from the flood's start to the end
	atVictim, elsewhere []time.Duration
	missing             []string
	slowest             []string // the ten slowest arrivals, slowest first
}

// ownKeyMarket is startMarket with each node vouching for its own key
// only: what a node that has attested no one vouches for.
func ownKeyMarket(t testing.TB, s *p2ptest.Swarm) (nodes []*marketNode, stop func()) {
	t.Helper()
	return marketOn(t, s, nil, true)
}

// The attackers' process: connFloodEnv holds the victim's address
// (/…/p2p/ID), connFloodSpamEnv whether to sign offers to flood with. It
// prints "ready" once its connAttackers hosts are connected, floods when
// it reads "flood", and when its input ends prints how many offers it
// sent and exits.
const (
	connFloodEnv     = "IDLEGRID_CONNFLOOD_VICTIM"
	connFloodSpamEnv = "IDLEGRID_CONNFLOOD_SPAM"
)

// connFloodPerKey is how many offers each attacker signs: enough for the
// longest a run floods.
const connFloodPerKey = int(connRate * (30*time.Second + connHonest*connHonestGap + connDeliver) / time.Second)

func connFloodAttackers() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	lowestCPUPriority()
	victim, err := peer.AddrInfoFromString(os.Getenv(connFloodEnv))
	if err != nil {
		return fail(err)
	}
	keys := make([]crypto.PrivKey, connAttackers)
	spam := make([][][]byte, connAttackers)
	var g errgroup.Group
	for k := range keys {
		g.Go(func() (err error) {
			if keys[k], _, err = crypto.GenerateEd25519Key(nil); err != nil || os.Getenv(connFloodSpamEnv) == "" {
				return err
			}
			spam[k], err = ownOffers(keys[k], connFloodPerKey)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	attackers := make([]*ownKeyPeer, len(keys))
	var dials errgroup.Group
	dials.SetLimit(4) // within the victim's handshakes in flight from one address
	for k, key := range keys {
		dials.Go(func() (err error) {
			attackers[k], err = dialOwnKeyPeer(ctx, key, *victim)
			return err
		})
	}
	err = dials.Wait()
	cancel()
	if err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	ctx, cancel = context.WithCancel(context.Background())
	var sent atomic.Int64
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "flood" {
			continue
		}
		for a, at := range attackers {
			g.Go(func() error {
				sent.Add(int64(floodAt(ctx, at.publish, spam[a], connRate, 100*time.Millisecond)))
				return nil
			})
		}
	}
	cancel()
	g.Wait()
	fmt.Println(sent.Load())
	for _, a := range attackers {
		a.h.Close()
	}
	return 0
}

// ownOffers signs n offers of key, under its cap of IDs in turn, each
// with a higher seq.
func ownOffers(key crypto.PrivKey, n int) ([][]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	s := signer{key, id}
	out := make([][]byte, n)
	now := time.Now()
	for i := range out {
		if out[i], err = s.sign(fmt.Sprint("spam-", i%p2p.IssuerCaps[p2p.TopicOffers]), uint64(i+1), now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ownKeyPeer is an attacker's host with the key it floods with,
// connected to the victim, writing gossipsub RPCs and answering nothing.
type ownKeyPeer struct {
	h     host.Host
	s     network.Stream
	topic string
}

func dialOwnKeyPeer(ctx context.Context, key crypto.PrivKey, victim peer.AddrInfo) (*ownKeyPeer, error) {
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		return nil, err
	}
	if err := h.Connect(ctx, victim); err != nil {
		h.Close()
		return nil, err
	}
	s, err := h.NewStream(ctx, victim.ID, pubsub.GossipSubID_v11)
	if err != nil {
		h.Close()
		return nil, err
	}
	return &ownKeyPeer{h: h, s: s, topic: p2p.Swarm{Name: p2ptest.DefaultSwarmName}.Topic(p2p.TopicOffers)}, nil
}

func (a *ownKeyPeer) publish(msg []byte) error {
	rpc, err := proto.Marshal(&pubsubpb.RPC{Publish: []*pubsubpb.Message{{Data: msg, Topic: &a.topic}}})
	if err != nil {
		return err
	}
	_, err = a.s.Write(append(binary.AppendUvarint(nil, uint64(len(rpc))), rpc...))
	return err
}

// attackerProcess is the attackers' process, started for victim.
type attackerProcess struct {
	stdin io.WriteCloser
	out   *bufio.Scanner
	log   *p2ptest.Log
}

func startAttackers(b *testing.B, addr string, spam bool) *attackerProcess {
	b.Helper()
	var wrap []string
	if chrt, err := exec.LookPath("chrt"); err == nil {
		// SCHED_IDLE: the attackers run only on a core no honest node
		// wants, as if on machines of their own.
		wrap = []string{chrt, "--idle", "0"}
	}
	env := []string{connFloodEnv + "=" + addr}
	if spam {
		env = append(env, connFloodSpamEnv+"=1")
	}
	stdin, stdout, log := startSelf(b, wrap, env...)
	a := &attackerProcess{stdin: stdin, out: bufio.NewScanner(stdout), log: log}
	if a.line(b) != "ready" {
		b.Fatalf("the attackers' process did not connect:\n%s", a.log.String())
	}
	return a
}

// startSelf runs this test binary again, running no tests or
// benchmarks, with env added to this process's (TestMain picks its role
// from it) and behind the command wrap, if any. It returns the child's
// input and output and its log (its standard error); the child is
// killed, if its input's end has not ended it, when b ends.
func startSelf(b *testing.B, wrap []string, env ...string) (io.WriteCloser, io.Reader, *p2ptest.Log) {
	b.Helper()
	args := append(wrap, os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	log := &p2ptest.Log{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	return stdin, stdout, log
}

func (a *attackerProcess) line(b *testing.B) string {
	if !a.out.Scan() {
		b.Fatalf("the attackers' process ended: %v\n%s", a.out.Err(), a.log.String())
	}
	return a.out.Text()
}

// stop ends the flood and returns how many offers the attackers sent.
func (a *attackerProcess) stop(b *testing.B) int {
	a.stdin.Close()
	n, err := strconv.Atoi(a.line(b))
	if err != nil {
		b.Fatalf("the attackers' process: %v\n%s", err, a.log.String())
	}
	return n
}

// runConnFlood builds the honest nodes, the victim's process and the
// attackers' process, publishes the honest offers (during the flood, if
// flood) and waits until every honest node holds them or connDeliver
// has passed since the last.
func runConnFlood(b *testing.B, flood bool) connRun {
	const victimAt = connNodes - 1 // the victim's index in the arrivals
	s := p2ptest.NewLoopback(b, connNodes-1)
	defer s.Close()
	_, stopMarket := ownKeyMarket(b, s)
	defer stopMarket()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := s.WaitMesh(wctx, p2p.TopicOffers); err != nil {
		b.Fatal(err)
	}
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	arrivals := watchHonest(ctx, b, s, connNodes-1, &readers)
	victim := startVictim(b, s.Nodes, arrivals, victimAt)
	waitUntil(b, 60*time.Second, "the victim's mesh forms", func() bool { return victim.now(b).mesh >= pubsub.DefaultGossipSubParams().Dlo })
	attackers := startAttackers(b, victim.addr, flood)

	var run connRun
	before := victim.now(b)
	floodStart := time.Now()
	if flood {
		if _, err := io.WriteString(attackers.stdin, "flood\n"); err != nil {
			b.Fatal(err)
		}
		waitUntil(b, 30*time.Second, "the victim meets the flood", func() bool { return victim.now(b).ignored-before.ignored > connLeadIgnore })
	}

	now := time.Now()
	pace := time.NewTicker(connHonestGap)
	for n := range connHonest {
		i := n % (connNodes - 1) // every honest node but the victim
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
	after := victim.now(b)
	run.victimTook = after.accepted - before.accepted
	run.heap, run.rss, run.cpu = after.heap, after.rss, after.cpu-before.cpu
	run.flooded = attackers.stop(b)
	cancel()
	type arrival struct {
		id      string
		at      int
		latency time.Duration
	}
	var all []arrival
	arrivals.mu.Lock()
	for id, got := range arrivals.got {
		by := arrivals.sentBy[id]
		for i := range connNodes {
			at, ok := got[i]
			switch {
			case ok:
				all = append(all, arrival{id, i, at.Sub(arrivals.sentAt[id])})
			case i != by:
				run.missing = append(run.missing, fmt.Sprintf("%s (by node %d) at node %d", id, by, i))
			}
		}
	}
	arrivals.mu.Unlock()
	run.delivered = len(all)
	for _, a := range all {
		run.latencies = append(run.latencies, a.latency)
		if a.at == victimAt {
			run.atVictim = append(run.atVictim, a.latency)
		} else {
			run.elsewhere = append(run.elsewhere, a.latency)
		}
	}
	slices.SortFunc(all, func(a, b arrival) int { return cmp.Compare(b.latency, a.latency) })
	for _, a := range all[:min(10, len(all))] {
		run.slowest = append(run.slowest, fmt.Sprintf("%s at node %d in %s", a.id, a.at, a.latency.Round(100*time.Microsecond)))
	}
	slices.Sort(run.missing)
	return run
}
