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
// fresh nonce, the provider answers with a signed document made over it.
const AttestProtocol protocol.ID = "/idlegrid/attest/1.0.0"

// attestDeadline bounds one challenge, either side.
const attestDeadline = 15 * time.Second

// DocumentMaker makes a signed attestation document over a nonce.
type DocumentMaker func(ctx context.Context, nonce []byte) ([]byte, error)

// ServeAttestation answers challenges on h with what makeDoc returns.
func ServeAttestation(h host.Host, makeDoc DocumentMaker) {
	h.SetStreamHandler(AttestProtocol, func(s network.Stream) {
		defer s.Close()
		s.SetDeadline(time.Now().Add(attestDeadline))
		nonce := make([]byte, attest.NonceSize)
		if _, err := io.ReadFull(s, nonce); err != nil {
			s.Reset()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), attestDeadline)
		defer cancel()
		env, err := makeDoc(ctx, nonce)
		if err != nil {
			s.Reset()
			return
		}
		if err := msgio.NewVarintWriter(s).WriteMsg(env); err != nil {
			s.Reset()
		}
	})
}

// Challenge sends p a fresh random nonce and returns it with p's signed
// answer, unverified (attest.VerifyDocument does that), and the round trip.
func Challenge(ctx context.Context, h host.Host, p peer.ID) (nonce, env []byte, rtt time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, attestDeadline)
	defer cancel()
	nonce = make([]byte, attest.NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, 0, err
	}
	start := time.Now()
	s, err := h.NewStream(ctx, p, AttestProtocol)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("attest %s: %w", p, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if _, err := s.Write(nonce); err != nil {
		s.Reset()
		return nil, nil, 0, fmt.Errorf("attest %s: %w", p, err)
	}
	s.CloseWrite()
	env, err = msgio.NewVarintReaderSize(s, attest.MaxDocumentSize).ReadMsg()
	if err != nil {
		s.Reset()
		return nil, nil, 0, fmt.Errorf("attest %s: %w", p, err)
	}
	return nonce, env, time.Since(start), nil
}
