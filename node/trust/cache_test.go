package trust

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// keyring is a generated world's keys, each with its peer ID.
type keyring struct {
	keys []crypto.PrivKey
	ids  []peer.ID
}

func newKeyring(t testing.TB, n int) keyring {
	var kr keyring
	for range n {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		kr.keys, kr.ids = append(kr.keys, k), append(kr.ids, id)
	}
	return kr
}

// cosigned is a receipt of a completed lease between renter and
// provider, signed by both, ending at end.
func cosigned(t testing.TB, renter, provider crypto.PrivKey, lease string, end time.Time, hours float64) []byte {
	r, _ := peer.IDFromPrivateKey(renter)
	p, _ := peer.IDFromPrivateKey(provider)
	rc := &pb.Receipt{Version: market.Version, LeaseId: lease, Renter: []byte(r), Provider: []byte(p), Outcome: pb.Outcome_OUTCOME_COMPLETED,
		StartUnixMs: end.Add(-time.Duration(hours * float64(time.Hour))).UnixMilli(), EndUnixMs: end.UnixMilli(), MeteredSeconds: uint64(hours * 3600)}
	return signReceipt(t, renter, provider, rc)
}

// signReceipt is rc signed by provider and countersigned by renter, as
// a learned receipt travels; by provider alone with renter nil.
func signReceipt(t testing.TB, renter, provider crypto.PrivKey, rc *pb.Receipt) []byte {
	t.Helper()
	cs, err := market.NewCoSigned(provider, market.Provider, rc)
	if err == nil && renter != nil {
		err = market.CoSign[*pb.Receipt](renter, market.Renter, cs)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proto.Marshal(cs)
	return b
}

// learner is a reputation side on an in-memory datastore that learns
// nothing by itself: the test hands it what peers would serve.
func learner(t testing.TB, self peer.ID, seeds []peer.ID) (*Reputation, ds.Datastore) {
	d := dssync.MutexWrap(ds.NewMapDatastore())
	r := New(Deps{Self: self, Seeds: seeds, Store: records.Store{D: d}, Saved: d, Providers: func() []peer.ID { return nil },
		Clock: clock.System(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return r, d
}

// honestWorld is 40 providers and 160 renters with 2,000 co-signed
// receipts among them over the last ten days, grouped by provider as
// each would serve its own: what a node learns by asking them.
func honestWorld(t testing.TB, rng *rand.Rand) (renters, providers keyring, served map[peer.ID][][]byte) {
	renters, providers = newKeyring(t, 160), newKeyring(t, 40)
	served = map[peer.ID][][]byte{}
	now := time.Now()
	for i := range 2000 {
		ren, prov := rng.IntN(160), rng.IntN(40)
		end := now.Add(-time.Duration(rng.IntN(240)) * time.Hour)
		env := cosigned(t, renters.keys[ren], providers.keys[prov], fmt.Sprint("lease-", i), end, 0.5+rng.Float64()*4)
		served[providers.ids[prov]] = append(served[providers.ids[prov]], env)
	}
	return renters, providers, served
}

// Issue 28's receipt cache flood: 1,000 free keys serving 100 receipts
// each among themselves, dated ten years ahead, emptied a node's learned
// receipts (1,743 → 0, honest providers above the prior 40 → 0). Now a
// receipt dated ahead of the node's clock is refused, and a flood dated
// now fills only the pool of receipts no trust reaches: every honest
// learned receipt stays, and so does every honest provider's standing.
func TestAFloodOfStrangersReceiptsLeavesTheHonestOnesInPlace(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(28, 3))
	renters, providers, served := honestWorld(t, rng)
	me := newKeyring(t, 1).ids[0]
	r, saved := learner(t, me, renters.ids[:4])
	for _, p := range providers.ids {
		r.learn(ctx, p, served[p])
	}
	if err := r.recompute(ctx); err != nil {
		t.Fatal(err)
	}
	held := r.known.len()
	var honestKeys []ds.Key
	r.known.each(func(l learned) { honestKeys = append(honestKeys, l.key) })
	above := func() int {
		n, sc := 0, r.Scores()
		for _, p := range providers.ids {
			if sc.Reliability(p) > reputation.DefaultConfig().Prior {
				n++
			}
		}
		return n
	}
	aboveBefore := above()
	if held != 2000 || aboveBefore < 30 {
		t.Fatalf("before the flood: %d receipts held, %d honest providers above the prior; want 2,000 and most of the 40", held, aboveBefore)
	}

	// Dated ahead, through the whole path: refused on arrival.
	sybils := newKeyring(t, 100)
	ahead := time.Now().AddDate(10, 0, 0)
	var dated [][]byte
	for i := range p2p.MaxReceiptsReply {
		dated = append(dated, cosigned(t, sybils.keys[(i+1)%100], sybils.keys[0], fmt.Sprint("ahead-", i), ahead, 8))
	}
	if n := r.learn(ctx, sybils.ids[0], dated); n != 0 {
		t.Errorf("%d receipts dated ten years ahead were learned", n)
	}

	// Dated ahead, and again dated now, past the signatures (which cost
	// the node a verification each, at the pace it asks): 1,000 keys ×
	// 100 receipts, in replies of MaxReceiptsReply, recomputed every
	// eight replies as a node's asking rounds would.
	for _, at := range []time.Time{ahead, time.Now()} {
		var batch []learned
		replies := 0
		for k := range 1000 {
			for j := range 100 {
				ren, prov := peer.ID(fmt.Sprint("sybil-", (k+j+1)%1000)), peer.ID(fmt.Sprint("sybil-", k))
				h := sha256.Sum256(fmt.Appendf(nil, "%s %d %d", at, k, j))
				batch = append(batch, learned{key: learnedPrefix.ChildString(fmt.Sprintf("%x", h)),
					rc: reputation.Receipt{Renter: ren, Provider: prov, Kind: reputation.Good, Hours: 8, At: at, CoSigned: true}})
				if len(batch) == p2p.MaxReceiptsReply {
					r.keep(ctx, batch)
					if batch, replies = nil, replies+1; replies%8 == 0 {
						if err := r.recompute(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
		r.keep(ctx, batch)
		if err := r.recompute(ctx); err != nil {
			t.Fatal(err)
		}
		lost := 0
		for _, k := range honestKeys {
			if !r.known.has(k) {
				lost++
			} else if ok, _ := saved.Has(ctx, k); !ok {
				t.Fatalf("honest receipt %s held but not stored", k)
			}
		}
		if lost > 0 {
			t.Errorf("flood dated %s: %d of %d honest learned receipts evicted", at.Format(time.DateOnly), lost, len(honestKeys))
		}
		if got := above(); got < aboveBefore {
			t.Errorf("flood dated %s: honest providers above the prior %d → %d", at.Format(time.DateOnly), aboveBefore, got)
		}
		if r.known.len() > held+maxLoose || r.known.nLoose > maxLoose {
			t.Errorf("flood dated %s: %d receipts held, %d loose; want at most %d and %d", at.Format(time.DateOnly), r.known.len(), r.known.nLoose, held+maxLoose, maxLoose)
		}
		t.Logf("flood dated %s: %d of %d honest receipts kept, honest providers above the prior %d → %d, %d receipts held (%d loose)",
			at.Format(time.DateOnly), len(honestKeys)-lost, len(honestKeys), aboveBefore, above(), r.known.len(), r.known.nLoose)
	}
}

// A receipt whose parties no trust reaches is loose until a recompute
// anchors it: the loose pool takes the newest, so a flood cannot keep an
// honest newcomer's receipt out, and once anchored it stays.
func TestALooseReceiptIsAnchoredByTheNextRecompute(t *testing.T) {
	c := newLearnedCache()
	l := func(i int, ren, prov string) learned {
		return learned{key: learnedPrefix.ChildString(fmt.Sprint(i)), rc: reputation.Receipt{Renter: peer.ID(ren), Provider: peer.ID(prov)}}
	}
	for i := range maxLoose {
		if gone := c.add(l(i, fmt.Sprint("s", i%1000), fmt.Sprint("s", (i+1)%1000)), 0); len(gone) > 0 {
			t.Fatalf("below the bound, add %d evicted %v", i, gone)
		}
	}
	honest := l(-1, "renter", "newcomer")
	if gone := c.add(honest, 0); len(gone) != 1 || gone[0] == honest.key || c.nLoose != maxLoose {
		t.Fatalf("the loose pool full: evicted %v, %d loose; want the oldest alone", gone, c.nLoose)
	}
	trusted := map[peer.ID]float64{"renter": 0.2}
	c.anchor(func(p peer.ID) float64 { return trusted[p] })
	for i := range 2 * maxLoose {
		c.add(l(maxLoose+i, fmt.Sprint("s", i%1000), fmt.Sprint("s", (i+1)%1000)), 0)
	}
	if !c.has(honest.key) || c.nLoose != maxLoose || c.len() != maxLoose+1 {
		t.Errorf("after a flood of %d: the anchored receipt held %v, %d loose of %d", 2*maxLoose, c.has(honest.key), c.nLoose, c.len())
	}
}

// No peer is named by more than maxLearnedPerPeer receipts; past it the
// one ranked last goes: least trusted, then learned first.
func TestOnePeersReceiptsAreBounded(t *testing.T) {
	c := newLearnedCache()
	for i := range maxLearnedPerPeer + 10 {
		trust := 0.0
		if i%2 == 0 {
			trust = 0.5
		}
		c.add(learned{key: learnedPrefix.ChildString(fmt.Sprint(i)), rc: reputation.Receipt{Renter: peer.ID(fmt.Sprint("r", i)), Provider: "busy"}}, trust)
	}
	if n := len(c.naming["busy"]); n != maxLearnedPerPeer {
		t.Fatalf("%d receipts name one provider, want %d", n, maxLearnedPerPeer)
	}
	for i := range 20 {
		if i%2 == 0 && !c.has(learnedPrefix.ChildString(fmt.Sprint(i))) {
			t.Errorf("anchored receipt %d evicted before the loose ones", i)
		}
	}
	if c.has(learnedPrefix.ChildString("1")) || !c.has(learnedPrefix.ChildString(fmt.Sprint(maxLearnedPerPeer+9))) {
		t.Errorf("the loose receipts learned first should go first")
	}
}

// A cache full of anchored receipts makes room by the one ranked last:
// the least trusted, then the first learned.
func TestAFullCacheEvictsTheLeastTrusted(t *testing.T) {
	c := newLearnedCache()
	l := func(i int) learned {
		return learned{key: learnedPrefix.ChildString(fmt.Sprint(i)), rc: reputation.Receipt{Renter: peer.ID(fmt.Sprint("r", i)), Provider: peer.ID(fmt.Sprint("p", i))}}
	}
	for i := range maxLearned {
		trust := 0.5
		if i%1000 == 7 {
			trust = 0.1 // a hundred of the least trusted
		}
		if gone := c.add(l(i), trust); len(gone) > 0 {
			t.Fatalf("below the bound, add %d evicted %v", i, gone)
		}
	}
	var gone []ds.Key
	for i := range 150 {
		gone = append(gone, c.add(l(maxLearned+i), 0.9)...)
	}
	if len(gone) != 150 || c.len() != maxLearned {
		t.Fatalf("150 added to a full cache: %d evicted, %d held", len(gone), c.len())
	}
	for i, k := range gone {
		want := 7 + 1000*i // the least trusted first, in the order learned …
		if i >= 100 {
			want = i - 100 // … then the first learned of the rest, 7 gone
			if want >= 7 {
				want++
			}
		}
		if k != l(want).key {
			t.Fatalf("eviction %d: %s, want %s", i, k, l(want).key)
		}
	}
}
