package p2p

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// AttestProtocol carries an attestation challenge: the renter sends a
// fresh nonce; the provider answers with two varint-delimited messages, a
// signed document made over the nonce and the standing document its offer
// names by hash (empty when it has none).
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const AttestProtocol protocol.ID = "/idlegrid/attest/1.0.0"

// attestDeadline bounds one challenge, either side.
const attestDeadline = 15 * time.Second

// AttestLimits bound the attestation server: signing a document for every
// nonce costs the provider, so a peer gets two challenges at a time, one
// every two seconds after a burst of five.
var AttestLimits = StreamLimits{
	Service: "idlegrid.attest", Memory: 2 * attest.MaxDocumentSize,
	Request: requestDeadline, Deadline: attestDeadline, PerPeer: 2, Rate: Rate{0.5, 5},
}

// DocumentMaker makes a signed attestation document answering the nonce
// of challenger from, and returns it with the provider's current standing
// document (or nil).
type DocumentMaker func(ctx context.Context, from peer.ID, nonce []byte) (fresh, standing []byte, err error)

// ServeAttestation answers challenges with what makeDoc returns.
func ServeAttestation(sv Server, makeDoc DocumentMaker) {
	sv.Serve(AttestProtocol, AttestLimits, func(ctx context.Context, from peer.ID, s network.Stream) error {
		nonce := make([]byte, attest.NonceSize)
		if _, err := io.ReadFull(s, nonce); err != nil {
			return err
		}
		fresh, standing, err := makeDoc(ctx, from, nonce)
		if err != nil {
			return err
		}
		w := msgio.NewVarintWriter(s)
		if err := w.WriteMsg(fresh); err != nil {
			return err
		}
		return w.WriteMsg(standing)
	})
}

// Answer is a provider's answer to a challenge, unverified
// (attest.Judge does that).
type Answer struct {
	Nonce    []byte
	Fresh    []byte // signed document over Nonce
	Standing []byte // standing document, or empty
	RTT      time.Duration
}

// Challenge sends p a fresh random nonce and returns its answer, and the
// round trip.
func Challenge(ctx context.Context, h host.Host, sw Swarm, p peer.ID) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, attestDeadline)
	defer cancel()
	a := Answer{Nonce: make([]byte, attest.NonceSize)}
	if _, err := rand.Read(a.Nonce); err != nil {
		return Answer{}, err
	}
	start := time.Now()
	s, err := dial(ctx, h, sw, p, AttestProtocol)
	if err != nil {
		return Answer{}, fmt.Errorf("attest %s: %w", p, err)
	}
	defer s.Close()
	if _, err := s.Write(a.Nonce); err != nil {
		s.Reset()
		return Answer{}, fmt.Errorf("attest %s: %w", p, err)
	}
	s.CloseWrite()
	r := msgio.NewVarintReaderSize(s, attest.MaxDocumentSize)
	if a.Fresh, err = r.ReadMsg(); err == nil {
		a.RTT = time.Since(start)
		a.Standing, err = r.ReadMsg()
	}
	if err != nil {
		s.Reset()
		return Answer{}, fmt.Errorf("attest %s: %w", p, err)
	}
	return a, nil
}
