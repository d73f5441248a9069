package trust

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/libp2p/go-libp2p/core/peer"
)

// BenchmarkLearnABatch holds one reply of MaxReceiptsReply (256) new
// receipts in a cache full to its bound (100,000 receipts among 10,000
// peers, a tenth of them loose), beside a plain pass over the held
// receipts that counts each peer's (what the old cache did with every
// reply, and sorted besides), and reports the ratio.
//
//	go test ./node/trust -run '^$' -bench LearnABatch -benchtime 200x
func BenchmarkLearnABatch(b *testing.B) {
	r := rand.New(rand.NewPCG(8, 8))
	c := newLearnedCache()
	seq := 0
	receipt := func() learned {
		seq++
		ren, prov := peer.ID(fmt.Sprint("r", r.IntN(8000))), peer.ID(fmt.Sprint("p", r.IntN(2000)))
		return learned{key: learnedPrefix.ChildString(fmt.Sprint(seq)), rc: reputation.Receipt{Renter: ren, Provider: prov, At: time.Now()}}
	}
	for c.len() < maxLearned {
		trust := 0.0
		if seq%10 != 0 {
			trust = r.Float64()
		}
		c.add(receipt(), trust)
	}
	var batch, plain time.Duration
	var sink int
	b.ResetTimer()
	for range b.N {
		fresh := make([]learned, 256)
		for i := range fresh {
			fresh[i] = receipt()
		}
		t0 := time.Now()
		for i, l := range fresh {
			sink += len(c.add(l, float64(i%2)*0.5))
		}
		t1 := time.Now()
		perPeer := map[peer.ID]int{}
		c.each(func(l learned) { perPeer[l.rc.Renter]++; perPeer[l.rc.Provider]++ })
		t2 := time.Now()
		batch, plain = batch+t1.Sub(t0), plain+t2.Sub(t1)
		sink += len(perPeer)
	}
	b.ReportMetric(float64(batch.Microseconds())/1000/float64(b.N), "ms/batch")
	b.ReportMetric(float64(plain.Microseconds())/1000/float64(b.N), "ms/plain-pass")
	b.ReportMetric(float64(batch)/float64(plain), "x-plain-pass")
	if sink == 0 {
		b.Fatal("nothing done")
	}
}
