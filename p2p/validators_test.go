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

// The meter, before any signature is checked: a stranger's message needs
// a token of its relay's budget and one of all strangers' together; a
// message of an issuer the node vouches for is checked whatever the
// relay's budget, and its relay's excess still counts.
func TestMeteredLetsVouchedIssuersByAndBoundsStrangers(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	v := NewMarketValidator(market.DefaultLimits(), nil, func() time.Time { return now }, nil)
	friend, friendEnv := signedOffer(t)
	_, strangerEnv := signedOffer(t)
	v.WithVouched(func(p peer.ID) bool { return p == friend })
	relays := []peer.ID{"relay-a", "relay-b", "relay-c"}
	offers := PeerRates[TopicOffers]
	strangers := StrangerRates[TopicOffers]

	// Strangers' messages from three relays, each within its own budget:
	// together they get the strangers' burst, no more.
	took := 0
	for i := range int(strangers.Burst) * 2 {
		if v.metered(TopicOffers, relays[i%len(relays)], strangerEnv) {
			took++
		}
	}
	if took != int(strangers.Burst) {
		t.Errorf("strangers' messages from three relays: %d checked, want the strangers' burst %d", took, int(strangers.Burst))
	}
	for _, r := range relays {
		if e := v.AppScore(r); e != 0 {
			t.Errorf("%s, within its own budget, scored %.0f", r, e)
		}
	}
	// One relay spends its whole budget; a vouched-for issuer's message
	// from it is checked all the same, and counts as excess.
	for range int(offers.Burst) {
		v.metered(TopicOffers, "flooder", strangerEnv)
	}
	if v.metered(TopicOffers, "flooder", strangerEnv) {
		t.Error("a stranger's message from a relay past its budget was checked")
	}
	before := v.AppScore("flooder")
	if !v.metered(TopicOffers, "flooder", friendEnv) {
		t.Error("a vouched-for issuer's message from a relay past its budget was not checked")
	}
	if after := v.AppScore("flooder"); after >= before {
		t.Errorf("the relay's score went from %.0f to %.0f for a message past its budget", before, after)
	}
	// Time refills the strangers' budget at its rate.
	now = now.Add(time.Second)
	took = 0
	for range 100 {
		if v.metered(TopicOffers, "relay-d", strangerEnv) {
			took++
		}
	}
	if took != int(strangers.PerSecond) {
		t.Errorf("a second later, %d strangers' messages checked, want %d", took, int(strangers.PerSecond))
	}
	// Garbage has no signer to vouch for: it is metered as a stranger's.
	now = now.Add(time.Hour)
	v.metered(TopicOffers, "relay-e", []byte("garbage"))
	if got := v.strangers[TopicOffers].accounts[""].tokens; got != strangers.Burst-1 {
		t.Errorf("garbage left the strangers %.0f tokens, want %.0f", got, strangers.Burst-1)
	}
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
	_, env := signedOffer(t)
	count := func(topic, reason string) int64 { return v.verdicts[topic][reason].Load() }
	for range int(StrangerRates[TopicOffers].Burst) + 1 {
		v.metered(TopicOffers, "relay", env)
	}
	if got := count(TopicOffers, ReasonStrangerBudget); got != 1 {
		t.Errorf("offers ignored for the strangers' budget: %d, want 1", got)
	}
	for range int(PeerRates[TopicBids].Burst) + 1 {
		v.metered(TopicBids, "flooder", env)
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
