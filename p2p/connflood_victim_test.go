package p2p_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
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
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// The victim's process in BenchmarkHonestOffersUnderConnectedFlood:
// connVictimEnv holds the honest nodes' addresses (/…/p2p/ID, comma
// separated). It runs one market node as marketOn's, vouching for its
// own key only, connected to those nodes; prints "addr ADDRESS" once it
// is, then "arrived ID UNIXNANO" as each honest offer (ID "honest-…")
// reaches it; answers each "stats" on its input with "stats ACCEPTED
// IGNORED MESH HEAP RSS CPU" (CPU: nanoseconds it has used); and exits when its input ends. It is a machine
// of its own as the attack finds it: what it holds and spends is its
// own, and its work takes no turns from the honest nodes' goroutines.
const connVictimEnv = "IDLEGRID_CONNFLOOD_PEERS"

func connFloodVictim() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return fail(err)
	}
	sw := p2p.Swarm{Name: p2ptest.DefaultSwarmName}
	h, err := p2p.NewHost(p2p.HostConfig{Identity: key, Swarm: sw, ListenAddrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")},
		ConnLow: 100, ConnHigh: 400, ConnGrace: time.Minute, Limits: p2p.DefaultLimits})
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	g, err := p2p.NewGossip(ctx, h, p2p.GossipConfig{Swarm: sw, OutboundQueue: 1024, MaxMessageSize: 1 << 20, PeerScoring: true, ValidatorTimeout: 2 * time.Second})
	if err != nil {
		return fail(err)
	}
	seqs, err := p2p.OpenSeqGuard(ctx, dssync.MutexWrap(ds.NewMapDatastore()))
	if err != nil {
		return fail(err)
	}
	own := func(p peer.ID) bool { return p == h.ID() }
	v := p2p.NewMarketValidator(market.DefaultLimits(), seqs, time.Now, nil).WithVouched(own)
	if err := v.Install(g); err != nil {
		return fail(err)
	}
	book := market.NewBook()
	limits := market.DefaultBookLimits()
	book.SetLimits(limits, func(p peer.ID) int {
		if own(p) {
			return market.RankOwn
		}
		return market.RankUnknown
	}, nil)
	seqs.SetLimit(p2p.TopicOffers, limits.Offers, own)
	sub, err := g.Topic(p2p.TopicOffers).Subscribe(pubsub.WithBufferSize(1 << 14))
	if err != nil {
		return fail(err)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	go func() {
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			o := msg.ValidatorData.(*pb.Offer)
			book.PutOffer(o, time.Now())
			if strings.HasPrefix(o.Header.Id, "honest-") {
				say("arrived %s %d", o.Header.Id, time.Now().UnixNano())
			}
		}
	}()
	for _, a := range strings.Split(os.Getenv(connVictimEnv), ",") {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return fail(err)
		}
		if err := h.Connect(ctx, *ai); err != nil {
			return fail(err)
		}
	}
	say("addr %s/p2p/%s", h.Addrs()[0], h.ID())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "stats" {
			heap, rss := memoryInUse()
			say("stats %d %d %d %.0f %.0f %d", v.Accepted.Load(), v.Ignored.Load(), len(g.Mesh(p2p.TopicOffers)), heap, rss, processCPU())
		}
	}
	return 0
}

// victimProcess is the victim's process, started for the honest nodes.
type victimProcess struct {
	addr  string
	stdin io.WriteCloser
	stats chan victimStats
	log   *p2ptest.Log
}

type victimStats struct {
	accepted, ignored int64
	mesh              int
	heap, rss         float64
	cpu               time.Duration
}

// startVictim starts the victim's process connected to nodes, and
// records each honest offer's arrival at it in arrivals as node at's.
func startVictim(b *testing.B, nodes []*p2ptest.Node, arrivals *arrivalLog, at int) *victimProcess {
	b.Helper()
	var addrs []string
	for _, nd := range nodes {
		addrs = append(addrs, nd.Host.Addrs()[0].String()+"/p2p/"+nd.Host.ID().String())
	}
	stdin, stdout, log := startSelf(b, nil, connVictimEnv+"="+strings.Join(addrs, ","))
	v := &victimProcess{stdin: stdin, stats: make(chan victimStats), log: log}
	addr := make(chan string, 1)
	go func() {
		defer close(addr)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 2 && f[0] == "addr":
				addr <- f[1]
			case len(f) == 3 && f[0] == "arrived":
				var ns int64
				fmt.Sscan(f[2], &ns)
				arrivals.arrived(at, f[1], time.Unix(0, ns))
			case len(f) == 7 && f[0] == "stats":
				var s victimStats
				fmt.Sscan(strings.Join(f[1:], " "), &s.accepted, &s.ignored, &s.mesh, &s.heap, &s.rss, &s.cpu)
				v.stats <- s
			}
		}
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			b.Fatalf("the victim's process ended:\n%s", v.log.String())
		}
		v.addr = a
	case <-time.After(60 * time.Second):
		b.Fatalf("the victim's process did not connect:\n%s", v.log.String())
	}
	return v
}

// now asks the victim's process for its figures.
func (v *victimProcess) now(b *testing.B) victimStats {
	b.Helper()
	if _, err := v.stdin.Write([]byte("stats\n")); err != nil {
		b.Fatal(err)
	}
	select {
	case s := <-v.stats:
		return s
	case <-time.After(30 * time.Second):
		b.Fatalf("the victim's process does not answer:\n%s", v.log.String())
	}
	return victimStats{}
}
