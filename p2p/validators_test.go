package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The door, before any signature is checked: a stranger's message needs
// a token of its relay's budget, of its issuer's and of all strangers'
// together; a message of an issuer the node vouches for is checked
// whatever the relay's budget, and its relay's excess still counts.
func TestAdmitLetsVouchedIssuersByAndBoundsStrangers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	v := NewMarketValidator(market.DefaultLimits(), nil, func() time.Time { return now }, nil)
	friend, friendEnv := signedOffer(t)
	v.WithVouched(func(p peer.ID) bool { return p == friend })
	relays := []peer.ID{"relay-a", "relay-b", "relay-c"}
	offers := PeerRates[TopicOffers]
	strangers := StrangerRates[TopicOffers]
	envs := strangerOffers(t, 2*int(strangers.Burst))

	// Strangers' messages from three relays, each within its own budget:
	// together they get at most the strangers' burst, each its share.
	took := 0
	for i := range int(strangers.Burst) * 2 {
		if v.admit(TopicOffers, relays[i%len(relays)], envs[i], byGossip) {
			took++
		}
	}
	if took > int(strangers.Burst) || took < int(strangers.Burst)/2-len(relays) {
		t.Errorf("strangers' messages from three relays: %d checked, want half the strangers' burst %d or more, and no more than it", took, int(strangers.Burst))
	}
	for _, r := range relays {
		if e := v.AppScore(r); e != 0 {
			t.Errorf("%s, within its own budget, scored %.0f", r, e)
		}
	}
	// One relay spends its whole budget; a vouched-for issuer's message
	// from it is checked all the same, and counts as excess.
	for i := range int(offers.Burst) {
		v.admit(TopicOffers, "flooder", envs[i], byGossip)
	}
	if v.admit(TopicOffers, "flooder", envs[0], byGossip) {
		t.Error("a stranger's message from a relay past its budget was checked")
	}
	before := v.AppScore("flooder")
	if !v.admit(TopicOffers, "flooder", friendEnv, byGossip) {
		t.Error("a vouched-for issuer's message from a relay past its budget was not checked")
	}
	if after := v.AppScore("flooder"); after >= before {
		t.Errorf("the relay's score went from %.0f to %.0f for a message past its budget", before, after)
	}
	// Time refills the strangers' budget at its rate.
	now = now.Add(time.Second)
	took = 0
	for i := range 100 {
		if v.admit(TopicOffers, "relay-d", envs[i], byGossip) {
			took++
		}
	}
	if took > int(strangers.PerSecond) || took == 0 {
		t.Errorf("a second later, %d strangers' messages checked, want at most %d", took, int(strangers.PerSecond))
	}
	// Garbage has no signer to vouch for: it is metered as a stranger's.
	now = now.Add(time.Hour)
	v.admit(TopicOffers, "relay-e", []byte("garbage"), byGossip)
	if v.strangers[TopicOffers].shares["relay-e"] == nil {
		t.Error("garbage did not draw on the strangers' budget")
	}
}

// A connection is not trust: peers that flood strangers' messages spend
// their own shares of the strangers' budget, not an honest relay's, and
// one issuer gets its own budget's worth whoever relays it, by gossip or
// by book sync.
func TestFloodingRelaysSpendTheirSharesAndAnIssuerItsBudget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	v := NewMarketValidator(market.DefaultLimits(), nil, func() time.Time { return now }, nil)
	strangers := StrangerRates[TopicOffers]
	envs := strangerOffers(t, 4000)
	next, honest, took := 0, 0, 0
	const flooders, secs = 50, 60
	for sec := range secs {
		for range 10 { // each flooder forty offers a second, in tenths
			for f := range flooders {
				for range 4 {
					if v.admit(TopicOffers, peer.ID(rune('A'+f)), envs[next%len(envs)], byGossip) {
						took++
					}
					next++
				}
			}
			now = now.Add(100 * time.Millisecond)
		}
		if sec%4 == 0 { // the honest relay: one offer each four seconds, below a fair share
			if v.admit(TopicOffers, "honest", envs[next%len(envs)], byGossip) {
				honest++
				took++
			}
			next++
		}
	}
	if honest != secs/4 {
		t.Errorf("the honest relay's offers passed %d times of %d", honest, secs/4)
	}
	if most := int(strangers.Burst + strangers.PerSecond*secs); took > most {
		t.Errorf("%d strangers' offers passed in %d s; the budget allows %d", took, secs, most)
	}

	// One issuer's offers, over many relays and book sync: its burst.
	key, _, _ := crypto.GenerateEd25519Key(nil)
	id, _ := peer.IDFromPrivateKey(key)
	now = now.Add(time.Hour)
	took2 := 0
	for i := range 200 {
		env, err := market.Sign(key, &pb.Offer{Header: &pb.Header{Version: market.Version, Issuer: []byte(id), Id: "o", Seq: uint64(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		how := byGossip
		if i%2 == 1 {
			how = bySync
		}
		if v.admit(TopicOffers, peer.ID(rune('a'+i%20)), env, how) {
			took2++
		}
	}
	if want := int(IssuerRates[TopicOffers].Burst); took2 != want {
		t.Errorf("one issuer over twenty relays and book sync: %d admitted, want its burst %d", took2, want)
	}
	_ = strangers
}

// strangerOffers signs n offers, each of a fresh key.
func strangerOffers(t *testing.T, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		_, out[i] = signedOffer(t)
	}
	return out
}

func signedOffer(t *testing.T) (peer.ID, []byte) {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	env, err := market.Sign(key, &pb.Offer{Header: &pb.Header{Version: market.Version, Issuer: []byte(id), Id: "o", Seq: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return id, env
}

// The budgets and the evidence topic count their verdicts with their
// reasons too: a message ignored unread for its relay's budget or the
// strangers', evidence that proves, that cannot be checked here, and
// that proves nothing.
func TestBudgetsAndEvidenceAreCountedWithTheirReasons(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	v := NewMarketValidator(market.DefaultLimits(), nil, func() time.Time { return now }, nil)
	envs := strangerOffers(t, int(StrangerRates[TopicOffers].Burst)/2+1) // one relay's share, and one more
	count := func(topic, reason string) int64 { return v.verdicts[topic][reason].Load() }
	for _, env := range envs {
		v.admit(TopicOffers, "relay", env, byGossip)
	}
	if got := count(TopicOffers, ReasonStrangerBudget); got != 1 {
		t.Errorf("offers ignored for the strangers' budget: %d, want 1", got)
	}
	for i := range int(PeerRates[TopicBids].Burst) + 1 {
		v.admit(TopicBids, "flooder", envs[i%len(envs)], byGossip)
	}
	if got := count(TopicBids, ReasonPeerBudget); got != 1 {
		t.Errorf("bids ignored for the relay's budget: %d, want 1", got)
	}

	doc := func(key crypto.PrivKey, uuids ...string) []byte {
		t.Helper()
		id, _ := peer.IDFromPrivateKey(key)
		var inv attest.Inventory
		for _, u := range uuids {
			inv.GPUs = append(inv.GPUs, attest.GPU{UUID: u})
		}
		env, err := attest.SignDocument(key, attest.NewDocument(inv, id, attest.Challenge{}, now, nil))
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	liar, _, _ := crypto.GenerateEd25519Key(nil)
	other, _, _ := crypto.GenerateEd25519Key(nil)
	contradiction, _ := attest.NewEvidence(doc(liar, "GPU-1", "GPU-2"), doc(liar, "GPU-1"))
	claims, _ := attest.NewEvidence(doc(liar, "GPU-1"), doc(other, "GPU-1"))
	for _, tc := range []struct {
		what, reason string
		data         []byte
		want         pubsub.ValidationResult
	}{
		{"one key's two documents of different GPUs", ReasonOK, contradiction, pubsub.ValidationAccept},
		{"two peers' claims of one GPU, without CC roots", ReasonUnchecked, claims, pubsub.ValidationIgnore},
		{"garbage", ReasonUnproven, []byte("garbage"), pubsub.ValidationReject},
	} {
		before := count(TopicEvidence, tc.reason)
		msg := &pubsub.Message{Message: &pubsubpb.Message{Data: tc.data}}
		if got := v.validateEvidence(context.Background(), "relay", msg); got != tc.want {
			t.Errorf("%s: verdict %v, want %v", tc.what, got, tc.want)
		}
		if got := count(TopicEvidence, tc.reason); got != before+1 {
			t.Errorf("%s: evidence/%s counts %d, want %d", tc.what, tc.reason, got, before+1)
		}
	}
	for range int(PeerRates[TopicEvidence].Burst) + 1 {
		v.within(TopicEvidence, "flooder")
	}
	if got := count(TopicEvidence, ReasonPeerBudget); got != 1 {
		t.Errorf("evidence ignored for the relay's budget: %d, want 1", got)
	}
}
