package p2p_test

import (
	"context"
	"crypto/rand"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// coordSwarm is n mocknet hosts at rows rows[i] of a matrix, every pair
// linked at the matrix's delay, each serving its coordinate and ping and
// sampling through a Pinger as a node does.
type coordSwarm struct {
	m      p2ptest.Matrix
	rows   []int
	hosts  []host.Host
	coords []*p2p.Coordinates
	pinger []*p2p.Pinger
}

func newCoordSwarm(t testing.TB, m p2ptest.Matrix, rows []int) *coordSwarm {
	return newCoordSwarmLying(t, m, rows, nil)
}

// newCoordSwarmLying is newCoordSwarm where node i answers the coordinate
// exchange with lie(i) when that is not nil.
func newCoordSwarmLying(t testing.TB, m p2ptest.Matrix, rows []int, lie func(i int) *coordinate.Coordinate) *coordSwarm {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	s := &coordSwarm{m: m, rows: rows}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range rows {
		key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
		h, err := mn.AddPeer(key, p2ptest.MockAddr(i))
		if err != nil {
			t.Fatal(err)
		}
		ping.NewPingService(h)
		c := p2p.NewCoordinates()
		own := c.Own
		if l := lie; l != nil && l(i) != nil {
			own = func() *coordinate.Coordinate { return l(i) }
		}
		p2p.ServeCoord(p2p.Server{Host: h, Ctx: ctx}, own)
		p := p2p.NewPinger(h, time.Hour, nil)
		p.Track(c, p2p.Swarm{})
		s.hosts, s.coords, s.pinger = append(s.hosts, h), append(s.coords, c), append(s.pinger, p)
	}
	for i := range rows {
		for j := i + 1; j < len(rows); j++ {
			l, err := mn.LinkPeers(s.hosts[i].ID(), s.hosts[j].ID())
			if err != nil {
				t.Fatal(err)
			}
			l.SetOptions(mocknet.LinkOptions{Latency: m.OneWay(rows[i], rows[j])})
		}
	}
	return s
}

// sample has every node sample k peers at a time, each a peer at
// random, until ctx ends: as many samples as the links' delays allow.
func (s *coordSwarm) sample(ctx context.Context, k int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, h := range s.hosts {
		for w := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := mrand.New(mrand.NewPCG(uint64(i), uint64(w)))
				for ctx.Err() == nil {
					j := rnd.IntN(len(s.hosts) - 1)
					if j >= i {
						j++
					}
					other := s.hosts[j]
					h.Peerstore().AddAddrs(other.ID(), other.Addrs(), time.Hour)
					s.pinger[i].Sample(ctx, other.ID())
					select {
					case <-time.After(samplePause):
					case <-ctx.Done():
					}
				}
			}()
		}
	}
	return &wg
}

// relErrors are |estimate − true| / true over every pair with a true RTT
// of at least 1 ms (of the nodes honest says, all when nil), sorted.
func (s *coordSwarm) relErrors() []float64 { return s.relErrorsOf(nil) }

func (s *coordSwarm) relErrorsOf(honest func(i int) bool) []float64 {
	var errs []float64
	for i := range s.hosts {
		for j := i + 1; j < len(s.hosts); j++ {
			if honest != nil && (!honest(i) || !honest(j)) {
				continue
			}
			truth := s.m.OneWay(s.rows[i], s.rows[j]) * 2
			if truth < time.Millisecond {
				continue
			}
			est := s.coords[i].Own().DistanceTo(s.coords[j].Own())
			errs = append(errs, math.Abs(float64(est-truth))/float64(truth))
		}
	}
	slices.Sort(errs)
	return errs
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// converge has every node sample k peers at a time until the median
// relative error holds at or under goal for three looks running (a look
// a second), or within passes; it returns the errors at the end and how
// long the swarm took to get under goal (within if it never did).
func (s *coordSwarm) converge(k int, goal float64, within time.Duration) (errs []float64, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	wg := s.sample(ctx, k)
	defer wg.Wait()
	defer cancel()
	start := time.Now()
	took = within
	under := 0
	for tick := time.NewTicker(time.Second); ctx.Err() == nil; {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		errs = s.relErrors()
		if quantile(errs, 0.5) > goal {
			under, took = 0, within
			continue
		}
		if under == 0 {
			took = time.Since(start)
		}
		if under++; under == 3 {
			break
		}
	}
	return errs, took
}

// rows returns n rows of m from first, skipping rows whose RTT to any
// other taken row is missing (0 off the diagonal).
func takeRows(m p2ptest.Matrix, first, n int) []int { return m.CompleteRows(first, n) }

// samplePause is how long a node's sampler rests between samples: the
// swarm's 200 nodes must not load the machine so much that its scheduler,
// not the links, sets the RTTs measured.
const samplePause = 100 * time.Millisecond

// coordGoal is the median relative error the coordinates must reach.
const coordGoal = 0.12
