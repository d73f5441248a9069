package p2p_test

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

// A book sync's answer of many offers leaves in writes of up to
// p2p.AnswerBuffer, not one an offer: on mocknet, which takes a stream's
// writes one at a time a link latency apart, 200 offers of 512 bytes
// arrive within a few round trips (the stream's negotiation, the
// request, four writes), where one write an offer took 200 latencies.
// In simulated time, so the figure is the links', not the machine's.
func TestABookSyncAnswersInRoundTripsNotALatencyAnOffer(t *testing.T) {
	p2ptest.Simulate(t, func(t *testing.T) {
		const rtt = 100 * time.Millisecond
		lat := p2ptest.Matrix{{0, 100}, {100, 0}}
		s := p2ptest.NewMocknet(t, 2, p2ptest.WithLatency(lat, 0))
		book := make([][]byte, 200)
		for i := range book {
			book[i] = make([]byte, 512)
			book[i][0] = byte(i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		server := s.Nodes[1].Host
		p2p.ServeBookSync(p2p.Server{Host: server, Swarm: p2p.Swarm{Name: p2ptest.DefaultSwarmName}, Ctx: ctx},
			func(context.Context) ([][]byte, error) { return book, nil })
		start := time.Now()
		n, err := p2p.FetchBook(ctx, s.Nodes[0].Host, p2p.Swarm{Name: p2ptest.DefaultSwarmName}, server.ID(), nil, func([]byte) {})
		took := time.Since(start)
		if err != nil || n != len(book) {
			t.Fatalf("fetched %d offers (%v), want %d", n, err, len(book))
		}
		writes := (len(book)*(512+2) + p2p.AnswerBuffer - 1) / p2p.AnswerBuffer
		if most := time.Duration(3+writes) * rtt; took > most {
			t.Errorf("a book sync of %d offers took %v of simulated time, past %v (%d round trips of %v and a latency a write of %d bytes)",
				len(book), took, most, 3, rtt, p2p.AnswerBuffer)
		}
		t.Logf("%d offers of 512 bytes in %v over a link of %v RTT", len(book), took, rtt)
	})
}
