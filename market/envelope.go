package market

import (
	"crypto/ed25519"
	"encoding/binary"
	"sync"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The fast path of Open: a libp2p signed envelope signed with an Ed25519
// key, read field by field and verified with crypto/ed25519 directly. It
// is the same check record.ConsumeTypedEnvelope makes (the signature
// covers the domain, the payload type and the payload, each prefixed with
// its length as an unsigned varint), without decoding the envelope and the
// key into libp2p's general types. Anything it does not expect (another
// key type, an unknown or repeated field) goes to the general path.

// Envelope and public-key field numbers (core/record/pb, core/crypto/pb).
const (
	envPublicKey   = 1
	envPayloadType = 2
	envPayload     = 3
	envSignature   = 5
	keyType        = 1
	keyData        = 2
	keyTypeEd25519 = 1
)

// fastEnvelope is what openFast reads out of an envelope.
type fastEnvelope struct {
	pub, payloadType, payload, sig []byte
}

// parseFast splits an envelope into its fields, or reports that it is not
// the plain Ed25519 case.
func parseFast(data []byte) (fastEnvelope, bool) {
	var e fastEnvelope
	seen := 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || typ != protowire.BytesType {
			return e, false
		}
		data = data[n:]
		v, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return e, false
		}
		data = data[n:]
		bit := 1 << num
		if num > 8 || seen&bit != 0 {
			return e, false
		}
		seen |= bit
		switch num {
		case envPublicKey:
			pub, ok := parseEd25519Key(v)
			if !ok {
				return e, false
			}
			e.pub = pub
		case envPayloadType:
			e.payloadType = v
		case envPayload:
			e.payload = v
		case envSignature:
			e.sig = v
		default:
			return e, false
		}
	}
	return e, e.pub != nil && e.sig != nil
}

// parseEd25519Key reads a protobuf PublicKey{Type: Ed25519, Data: 32 bytes}.
func parseEd25519Key(b []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != keyType || typ != protowire.VarintType {
		return nil, false
	}
	b = b[n:]
	kt, n := protowire.ConsumeVarint(b)
	if n < 0 || kt != keyTypeEd25519 {
		return nil, false
	}
	b = b[n:]
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 || num != keyData || typ != protowire.BytesType {
		return nil, false
	}
	key, n := protowire.ConsumeBytes(b[n:])
	if n < 0 || len(key) != ed25519.PublicKeySize || n != len(b)-protowire.SizeTag(keyData) {
		return nil, false
	}
	return key, true
}

var unsignedPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// verifyFast checks e's signature over domain, payload type and payload.
func verifyFast(e fastEnvelope, domain string) bool {
	bp := unsignedPool.Get().(*[]byte)
	b := (*bp)[:0]
	b = binary.AppendUvarint(b, uint64(len(domain)))
	b = append(b, domain...)
	b = binary.AppendUvarint(b, uint64(len(e.payloadType)))
	b = append(b, e.payloadType...)
	b = binary.AppendUvarint(b, uint64(len(e.payload)))
	b = append(b, e.payload...)
	ok := ed25519.Verify(e.pub, b, e.sig)
	*bp = b
	unsignedPool.Put(bp)
	return ok
}

// Signer returns the peer whose key an envelope carries, unverified and
// without decoding its payload: cheap enough to decide, before the
// signature is checked, how to meter a message. A forgery may name
// anyone; Open settles it. false for an envelope off the Ed25519 path.
func Signer(data []byte) (peer.ID, bool) {
	if len(data) > MaxEnvelopeSize {
		return "", false
	}
	e, ok := parseFast(data)
	if !ok {
		return "", false
	}
	pub, err := crypto.UnmarshalEd25519PublicKey(e.pub)
	if err != nil {
		return "", false
	}
	id, err := peer.IDFromPublicKey(pub)
	return id, err == nil
}

// ClaimedOffer returns the issuer, ID and sequence number that an offer
// envelope's header claims, unverified: cheap enough to see, before the
// signature is checked, that a book already holds what a book sync
// brings. A forgery may claim anything; only a decision that drops the
// envelope unread may rest on it. false off the Ed25519 path or for a
// payload that is no offer.
func ClaimedOffer(data []byte) (issuer peer.ID, id string, seq uint64, ok bool) {
	o, ok := Claimed(data)
	if !ok {
		return "", "", 0, false
	}
	h := o.GetHeader()
	return peer.ID(h.Issuer), h.Id, h.Seq, true
}

// Claimed returns the offer an envelope carries, unverified, on the
// terms of ClaimedOffer: only a decision that drops the envelope unread
// may rest on it.
func Claimed(data []byte) (*pb.Offer, bool) {
	o := new(pb.Offer)
	return o, claimed(data, offerCodec, o)
}

// ClaimedBid is Claimed for a bid envelope.
func ClaimedBid(data []byte) (*pb.Bid, bool) {
	b := new(pb.Bid)
	return b, claimed(data, bidCodec, b)
}

// claimed decodes into m the payload of an envelope of codec, unverified.
func claimed(data, codec []byte, m interface {
	proto.Message
	GetHeader() *pb.Header
}) bool {
	if len(data) > MaxEnvelopeSize {
		return false
	}
	e, ok := parseFast(data)
	if !ok || string(e.payloadType) != string(codec) {
		return false
	}
	return proto.Unmarshal(e.payload, m) == nil && m.GetHeader() != nil
}
