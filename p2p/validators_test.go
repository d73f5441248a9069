package p2p

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
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
