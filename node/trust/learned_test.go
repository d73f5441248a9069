package trust

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A receipt a peer hands over counts only if both parties signed it, in
// this swarm, it names the peer asked about, and its dates hold (it ends
// by now, and meters no more than its span); one naming this node is
// left to its own records.
func TestOpenLearnedRefusesWhatItCannotCheck(t *testing.T) {
	key := func() (crypto.PrivKey, peer.ID) {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		return k, id
	}
	renterKey, renter := key()
	provKey, prov := key()
	_, self := key()
	_, stranger := key()
	sign := func(rc *pb.Receipt, both bool) []byte {
		if !both {
			return signReceipt(t, nil, provKey, rc)
		}
		return signReceipt(t, renterKey, provKey, rc)
	}
	receipt := func(swarm string) *pb.Receipt {
		return &pb.Receipt{Version: market.Version, LeaseId: "lease-1", Renter: []byte(renter), Provider: []byte(prov),
			Outcome: pb.Outcome_OUTCOME_COMPLETED, EndUnixMs: time.Now().UnixMilli(), MeteredSeconds: 3600, Swarm: swarm}
	}
	good := sign(receipt("lab-1"), true)
	if l, err := openLearned(good, prov, self, "lab-1", time.Now()); err != nil || l.rc.Provider != prov || l.rc.Kind != reputation.Good || l.rc.Hours != 1 || !l.rc.CoSigned {
		t.Fatalf("a good receipt: %+v, %v", l.rc, err)
	}
	ahead := receipt("lab-1")
	ahead.EndUnixMs = time.Now().AddDate(10, 0, 0).UnixMilli()
	overMetered := receipt("lab-1")
	overMetered.StartUnixMs = overMetered.EndUnixMs - 600_000 // ten minutes, metering an hour
	forged := append([]byte(nil), good...)
	forged[len(forged)-1] ^= 1
	for name, c := range map[string]struct {
		env     []byte
		subject peer.ID
		self    peer.ID
	}{
		"the provider's signature only": {sign(receipt("lab-1"), false), prov, self},
		"a changed byte":                {forged, prov, self},
		"another swarm's":               {sign(receipt(""), true), prov, self},
		"not of the peer asked about":   {good, stranger, self},
		"this node's own":               {good, prov, renter},
		"garbage":                       {[]byte("not a receipt"), prov, self},
		"dated ten years ahead":         {sign(ahead, true), prov, self},
		"metering more than its span":   {sign(overMetered, true), prov, self},
	} {
		if l, err := openLearned(c.env, c.subject, c.self, "lab-1", time.Now()); err == nil {
			t.Errorf("%s: learned %+v", name, l.rc)
		}
	}
}
