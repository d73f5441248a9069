package node

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/book"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// madeUpOffers signs n offers of cfg, each by a fresh key with no host
// behind it and naming a made-up attestation hash, as an attacker does
// for free, and hands each envelope to put.
func madeUpOffers(t *testing.T, cfg config.ProviderConfig, n int, now time.Time, put func(o *pb.Offer, env []byte)) map[peer.ID]bool {
	t.Helper()
	ids := map[peer.ID]bool{}
	for range n {
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		o, err := offer.Build(cfg, id, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		o.AttestationHash = make([]byte, 32)
		rand.Read(o.AttestationHash)
		env, err := market.Sign(key, o)
		if err != nil {
			t.Fatal(err)
		}
		put(o, env)
		ids[id] = true
	}
	return ids
}

// intoBook puts an offer straight into n's book, as its owner does with
// one a validator passed.
func intoBook(t *testing.T, n *Node) func(*pb.Offer, []byte) {
	return func(o *pb.Offer, _ []byte) {
		if err := n.market.Do(context.Background(), func(*book.State) {
			if err := n.market.Book.PutOffer(o, n.clock.Now()); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// cheapH100s are the made-up offers of issue 26: 8 H100s at 0.40.
func cheapH100s() config.ProviderConfig {
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.Price = "0.40"
	cfg.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0", Interconnect: "sxm"}}
	return cfg
}

// Rent's walk is bounded by time, not by a count (issue 26, attack 4: 64
// fake H100 offers at 0.40 with a made-up attestation hash, from keys with
// no host behind them, ended 'rent --try-for 3m' after "64 candidates
// tried" in 3.8 s, and the honest provider behind them was never tried).
// The renter knows where the honest provider listens: it is found at
// once, the made-up issuers are looked up beside it, and it is tried once
// no cheaper issuer is still being looked up within a short patience:
// none of the fakes takes a turn of its own, and the job runs.
func TestRentReachesTheHonestProviderBehindSeventyCheaperMadeUpOffers(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, _ := leaseSwarm(t, nil)
	renter := startNode(t, testRepo(t, "renter2", bootstrapFrom(prov)), Options{Light: true})
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	// However they came (gossip and book sync budget strangers' offers
	// apart), the renter's book holds them.
	fakes := madeUpOffers(t, cheapH100s(), 70, renter.clock.Now(), intoBook(t, renter))

	req := rentRequest(image, "true")
	req.TryMillis = 180_000
	res, err := renter.Rent(context.Background(), req, RentOutput{})
	if err != nil {
		t.Fatalf("rent: %v", err)
	}
	if res.Lease.Provider != prov.id.String() || res.Receipt.Outcome != views.LeaseCompleted {
		t.Errorf("rented from %s: %s", res.Lease.Provider, res.Receipt.Outcome)
	}
	for _, a := range res.Tried {
		if id, _ := peer.Decode(a.Provider); !fakes[id] || a.Stage != string(stageLocate) {
			t.Errorf("attempt %+v: want a made-up offer that could not be located", a)
		}
	}
}

// hidingDealer is a renter's link that finds nowhere the issuers in hang:
// their lookups block until their deadline, as a slow DHT's do.
type hidingDealer struct {
	renter.Dealer
	hang map[peer.ID]bool
}

func (d hidingDealer) Locate(ctx context.Context, p peer.ID) error {
	if d.hang[p] {
		<-ctx.Done()
		return ctx.Err()
	}
	return d.Dealer.Locate(ctx, p)
}

// Rent's walk is bounded by its try time, not by a count of candidates
// (issue 26, attack 4). With no evidence for any issuer (the renter knows
// no address and verified no attestation), a thousand cheaper made-up
// offers are looked up a bounded few at a time, each within its own
// bound (the first 16 never answer), and the honest provider behind them
// all is reached and runs the job within the try time, counting them on
// its status line rather than a line each.
func TestRentWalksAThousandMadeUpOffersWithinItsTryTime(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	var order []peer.ID
	put := intoBook(t, renter)
	fakes := madeUpOffers(t, cheapH100s(), 1000, renter.clock.Now(), func(o *pb.Offer, env []byte) {
		put(o, env)
		order = append(order, market.Issuer(o))
	})
	hang := map[peer.ID]bool{}
	for _, p := range order[:16] {
		hang[p] = true
	}
	// Before any rental: no evidence for any issuer.
	renter.renter.AddrsOf = func(peer.ID) []ma.Multiaddr { return nil }
	renter.renter.Net = hidingDealer{Dealer: renter.renter.Net, hang: hang}

	req := rentRequest(image, "true")
	req.TryMillis = 120_000
	start := time.Now()
	var said, statuses int // lines kept, and lines that replace each other
	res, err := renter.Rent(context.Background(), req, RentOutput{Progress: func(string) { said++ }, Status: func(string) { statuses++ }})
	if err != nil {
		t.Fatalf("rent after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if res.Lease.Provider != prov.id.String() || res.Receipt.Outcome != views.LeaseCompleted {
		t.Errorf("rented from %s: %s", res.Lease.Provider, res.Receipt.Outcome)
	}
	for _, a := range res.Tried {
		if id, _ := peer.Decode(a.Provider); !fakes[id] || a.Stage != string(stageLocate) {
			t.Errorf("attempt %+v: want a made-up offer that could not be located", a)
		}
	}
	if said > 50 {
		t.Errorf("rent printed %d progress lines for %d made-up offers; want their count on its status line", said, len(res.Tried))
	}
	t.Logf("walked %d made-up offers in %s (%d progress lines, %d status)", len(res.Tried), time.Since(start).Round(time.Millisecond), said, statuses)
}
