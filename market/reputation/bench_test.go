package reputation

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// BenchmarkCompute recomputes every score of a swarm of 10,000 peers
// (2,000 providers and 8,000 renters) from 100,000 receipts, beside a plain pass over the
// same receipts that sums each provider's hours (the least any ranking
// from receipts must do), and reports the ratio.
//
//	go test ./market/reputation -run '^$' -bench Compute -benchtime 20x
func BenchmarkCompute(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 7))
	var receipts []Receipt
	for i := range 100_000 {
		ren := fmt.Sprint("r", r.IntN(8000))
		if i%50 == 0 {
			ren = "me"
		}
		k := Good
		if r.IntN(20) == 0 {
			k = ProviderFault
		}
		receipts = append(receipts, Receipt{Renter: peer.ID(ren), Provider: peer.ID(fmt.Sprint("p", r.IntN(2000))), Kind: k,
			Hours: r.Float64() * 8, At: now.Add(-time.Duration(r.IntN(90*24)) * time.Hour), CoSigned: true})
	}
	in := Inputs{Self: "me", Seeds: []peer.ID{"r1", "r2", "r3"}, Receipts: receipts}
	var plain, full time.Duration
	var sink float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		hours := map[peer.ID]float64{}
		for _, rc := range receipts {
			hours[rc.Provider] += rc.Hours
		}
		t1 := time.Now()
		s := Compute(in, now, Config{})
		t2 := time.Now()
		plain, full = plain+t1.Sub(t0), full+t2.Sub(t1)
		sink += hours["p1"] + s.Reliability("p1")
	}
	b.ReportMetric(float64(full.Milliseconds())/float64(b.N), "ms/recompute")
	b.ReportMetric(float64(plain.Microseconds())/1000/float64(b.N), "ms/plain-pass")
	b.ReportMetric(float64(full)/float64(plain), "x-plain-pass")
	if sink == 0 {
		b.Fatal("nothing computed")
	}
}
