package market

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// Envelope domains and payload types, one per message type: a signature
// made for one type never verifies as another.
const (
	OfferDomain = "idlegrid-offer"
	BidDomain   = "idlegrid-bid"
	QuoteDomain = "idlegrid-quote"
)

var (
	offerCodec = []byte("/idlegrid/offer/1")
	bidCodec   = []byte("/idlegrid/bid/1")
	quoteCodec = []byte("/idlegrid/quote/1")
)

// MaxEnvelopeSize bounds every signed offer, bid and quote, in bytes: a
// real offer is about 300 B, and one with every list full still fits, so
// a flood of padded messages costs a node little each. Decoding refuses
// anything larger before it allocates for it.
const MaxEnvelopeSize = 8 << 10

// MaxCoSignedSize bounds the body of a co-signed lease or receipt: a lease
// carries its bid and the workload's command and environment.
const MaxCoSignedSize = 64 << 10

// Message is a market wire type.
type Message interface {
	*pb.Offer | *pb.Bid | *pb.Quote
	proto.Message
	GetHeader() *pb.Header
}

// signed adapts a wire message to libp2p's record.Record.
type signed[M Message] struct {
	msg    M
	domain string
	codec  []byte
}

func (s *signed[M]) Domain() string { return s.domain }
func (s *signed[M]) Codec() []byte  { return s.codec }

func (s *signed[M]) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(s.msg)
}

func (s *signed[M]) UnmarshalRecord(b []byte) error {
	s.msg = s.msg.ProtoReflect().New().Interface().(M)
	return Unmarshal(b, s.msg)
}

func recordFor[M Message](m M) *signed[M] {
	switch any(m).(type) {
	case *pb.Offer:
		return &signed[M]{msg: m, domain: OfferDomain, codec: offerCodec}
	case *pb.Bid:
		return &signed[M]{msg: m, domain: BidDomain, codec: bidCodec}
	default:
		return &signed[M]{msg: m, domain: QuoteDomain, codec: quoteCodec}
	}
}

// Sign seals m in a signed envelope with key. The message's header must
// name key's peer as its issuer.
func Sign[M Message](key crypto.PrivKey, m M) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	h := m.GetHeader()
	if h == nil {
		return nil, invalid("header", "missing")
	}
	if peer.ID(h.Issuer) != id {
		return nil, fmt.Errorf("sign: %w: header names %s, key is %s", ErrWrongIssuer, peer.ID(h.Issuer), id)
	}
	env, err := record.Seal(recordFor(m), key)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if len(b) > MaxEnvelopeSize {
		return nil, fmt.Errorf("sign: %w: %d bytes, limit %d", ErrTooLarge, len(b), MaxEnvelopeSize)
	}
	return b, nil
}

// Open verifies a signed envelope of message type M and returns the
// message. It fails with ErrTooLarge, ErrSignature (a changed byte, another
// type's envelope) or ErrWrongIssuer (signed by someone other than the
// issuer the header names). It checks the signature only: Validate checks
// the content.
func Open[M Message](data []byte) (M, error) {
	var zero M
	if len(data) > MaxEnvelopeSize {
		return zero, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelopeSize)
	}
	if e, ok := parseFast(data); ok {
		return openFast(recordFor(zero), e)
	}
	return openGeneral[M](data)
}

// openGeneral is Open through libp2p's record package, for any key type.
func openGeneral[M Message](data []byte) (M, error) {
	var zero M
	rec := recordFor(zero)
	env, err := record.ConsumeTypedEnvelope(data, rec)
	if fe := new(FieldError); errors.As(err, &fe) {
		return zero, fe
	}
	if err != nil {
		return zero, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	h := rec.msg.GetHeader()
	if h == nil {
		return zero, invalid("header", "missing")
	}
	issuer, err := peer.IDFromBytes(h.Issuer)
	if err != nil {
		return zero, invalid("header.issuer", "not a peer ID: %v", err)
	}
	if !signedBy(issuer, env.PublicKey) {
		return zero, fmt.Errorf("%w: header names %s", ErrWrongIssuer, issuer)
	}
	return rec.msg, nil
}

// openFast finishes Open for an Ed25519 envelope that parseFast read.
func openFast[M Message](rec *signed[M], e fastEnvelope) (M, error) {
	var zero M
	if string(e.payloadType) != string(rec.codec) {
		return zero, fmt.Errorf("%w: payload type %q, want %q", ErrSignature, clip(string(e.payloadType)), rec.codec)
	}
	if !verifyFast(e, rec.domain) {
		return zero, fmt.Errorf("%w: signature does not verify", ErrSignature)
	}
	if err := rec.UnmarshalRecord(e.payload); err != nil {
		if errors.Is(err, ErrInvalid) { // signed, but not a message this version takes
			return zero, err
		}
		return zero, fmt.Errorf("%w: payload: %v", ErrSignature, err)
	}
	h := rec.msg.GetHeader()
	if h == nil {
		return zero, invalid("header", "missing")
	}
	id := h.Issuer
	if len(id) != len(ed25519IDPrefix)+ed25519.PublicKeySize || string(id[:len(ed25519IDPrefix)]) != string(ed25519IDPrefix) || string(id[len(ed25519IDPrefix):]) != string(e.pub) {
		if _, err := peer.IDFromBytes(id); err != nil {
			return zero, invalid("header.issuer", "not a peer ID: %v", err)
		}
		return zero, fmt.Errorf("%w: header names %s", ErrWrongIssuer, peer.ID(id))
	}
	return rec.msg, nil
}

// ed25519IDPrefix opens every peer ID of an Ed25519 key: an identity
// multihash (0x00, length 36) of the protobuf PublicKey{Type: Ed25519,
// Data: 32 bytes}; the raw key follows.
var ed25519IDPrefix = []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// signedBy reports whether pk is the key of peer id. For Ed25519 keys, the
// common case, it compares the raw key inside the ID instead of re-encoding
// and hashing the key as peer.ID.MatchesPublicKey does.
func signedBy(id peer.ID, pk crypto.PubKey) bool {
	if pk.Type() == crypto.Ed25519 && len(id) == len(ed25519IDPrefix)+32 && string(id[:len(ed25519IDPrefix)]) == string(ed25519IDPrefix) {
		raw, err := pk.Raw()
		return err == nil && string(raw) == string(id[len(ed25519IDPrefix):])
	}
	return id.MatchesPublicKey(pk)
}

// Issuer returns the issuer of a message whose header Open has checked.
func Issuer[M Message](m M) peer.ID { return peer.ID(m.GetHeader().GetIssuer()) }
