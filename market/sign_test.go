package market

import (
	"errors"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

func TestSignOpenRoundTrip(t *testing.T) {
	key, id := fuzzKey(t)
	env, err := Sign(key, fuzzSeedOffer(id))
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open[*pb.Offer](env)
	if err != nil {
		t.Fatal(err)
	}
	if Issuer(o) != id || o.Gpus[0].Model != "H100" {
		t.Errorf("opened offer differs: %v", o)
	}
}

func TestSignaturesCannotBeMisused(t *testing.T) {
	keyA, idA := fuzzKey(t)
	keyB, _, _ := crypto.GenerateEd25519Key(&seededReader{b: 2})
	idB, _ := peer.IDFromPrivateKey(keyB)

	// B cannot sign an offer that names A as its issuer.
	if _, err := Sign(keyB, fuzzSeedOffer(idA)); !errors.Is(err, ErrWrongIssuer) {
		t.Errorf("B signed A's offer: %v", err)
	}

	// An envelope B signed over A's offer (made by hand) does not open.
	forged, err := Sign(keyB, fuzzSeedOffer(idB))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := Open[*pb.Offer](forged)
	o.Header.Issuer = []byte(idA)
	if env, err := sealUnchecked(keyB, o); err != nil {
		t.Fatal(err)
	} else if _, err := Open[*pb.Offer](env); !errors.Is(err, ErrWrongIssuer) {
		t.Errorf("an offer signed by B passed as A's: %v", err)
	}

	// A bid envelope cannot be opened as an offer, nor an offer as a quote.
	bidEnv, _ := Sign(keyA, fuzzSeedBid(idA))
	if _, err := Open[*pb.Offer](bidEnv); !errors.Is(err, ErrSignature) {
		t.Errorf("a bid opened as an offer: %v", err)
	}
	offerEnv, _ := Sign(keyA, fuzzSeedOffer(idA))
	if _, err := Open[*pb.Quote](offerEnv); !errors.Is(err, ErrSignature) {
		t.Errorf("an offer opened as a quote: %v", err)
	}

	// Any changed byte fails.
	for i := range offerEnv {
		bad := append([]byte(nil), offerEnv...)
		bad[i] ^= 0x01
		if _, err := Open[*pb.Offer](bad); err == nil {
			t.Fatalf("flipping byte %d of %d still verified", i, len(bad))
		}
	}

	// Oversized input is refused before decoding.
	if _, err := Open[*pb.Offer](make([]byte, MaxEnvelopeSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized envelope: %v", err)
	}
}

// sealUnchecked signs m with key without Sign's issuer check, as a forger would.
func sealUnchecked(key crypto.PrivKey, m *pb.Offer) ([]byte, error) {
	env, err := record.Seal(recordFor(m), key)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// TestFastOpenAgreesWithLibp2p checks the Ed25519 fast path of Open against
// libp2p's general envelope path on a valid envelope and on every one-byte
// change, truncation and extension of it: both accept or both refuse.
func TestFastOpenAgreesWithLibp2p(t *testing.T) {
	key, id := fuzzKey(t)
	env, err := Sign(key, fuzzSeedOffer(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parseFast(env); !ok {
		t.Fatal("a plain Ed25519 envelope does not take the fast path")
	}
	agree := func(what string, data []byte) {
		t.Helper()
		_, fastErr := Open[*pb.Offer](data)
		_, generalErr := openGeneral[*pb.Offer](data)
		if (fastErr == nil) != (generalErr == nil) {
			t.Fatalf("%s: fast path says %v, libp2p path says %v", what, fastErr, generalErr)
		}
	}
	agree("valid", env)
	for i := range env {
		for _, bit := range []byte{0x01, 0x80} {
			bad := append([]byte(nil), env...)
			bad[i] ^= bit
			agree("flipped byte", bad)
		}
		agree("truncated", env[:i])
	}
	agree("extended", append(append([]byte(nil), env...), 0x2a, 0x00))
	bid, _ := Sign(key, fuzzSeedBid(id))
	agree("a bid", bid)
}
