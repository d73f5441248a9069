package market

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

// Issue 11, attack 5: one key sent thousands of 60 KB offers, padded
// with fields this version does not know, and every node took, kept and
// forwarded them. Offers are bounded far below that, and a message with
// a field its type does not declare, at any depth, is refused.
func TestOpenRefusesPaddedAndOversizedMessages(t *testing.T) {
	key, id := fuzzKey(t)
	pad := func(m protoreflect.Message) {
		m.SetUnknown(protoreflect.RawFields(protowire.AppendBytes(protowire.AppendTag(nil, 999, protowire.BytesType), []byte("padding"))))
	}
	for _, c := range []struct {
		name string
		edit func(*pb.Offer)
		want error
		in   string
	}{
		{"an unknown field in the offer", func(o *pb.Offer) { pad(o.ProtoReflect()) }, ErrInvalid, "unknown field"},
		{"an unknown field in a GPU group", func(o *pb.Offer) { pad(o.Gpus[0].ProtoReflect()) }, ErrInvalid, "gpus.GPUGroup"},
		{"an unknown field in the header", func(o *pb.Offer) { pad(o.Header.ProtoReflect()) }, ErrInvalid, "header.Header"},
		{"60 KB of image rules", func(o *pb.Offer) {
			for i := range 240 {
				o.ImageDeny = append(o.ImageDeny, fmt.Sprintf("%0250d", i))
			}
		}, ErrTooLarge, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := fuzzSeedOffer(id)
			c.edit(o)
			payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			env, err := record.Seal(&rawOffer{payload}, key)
			if err != nil {
				t.Fatal(err)
			}
			data, err := env.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Open[*pb.Offer](data); !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.in) {
				t.Errorf("Open: %v, want %v naming %q", err, c.want, c.in)
			}
		})
	}
	if env, err := Sign(key, fuzzSeedOffer(id)); err != nil || len(env) > 1024 {
		t.Errorf("a real offer: %d bytes, %v", len(env), err)
	}
}

// rawOffer seals payload bytes as an offer, whatever they hold.
type rawOffer struct{ payload []byte }

func (r *rawOffer) Domain() string                 { return OfferDomain }
func (r *rawOffer) Codec() []byte                  { return offerCodec }
func (r *rawOffer) MarshalRecord() ([]byte, error) { return r.payload, nil }
func (r *rawOffer) UnmarshalRecord([]byte) error   { return nil }
