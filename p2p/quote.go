package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// QuoteProtocol carries a provider's signed quote to the renter whose bid
// it answers: one length-prefixed envelope per stream.
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const QuoteProtocol protocol.ID = "/idlegrid/quote/1.0.0"

// quoteDeadline bounds one quote exchange.
const quoteDeadline = 10 * time.Second

// QuoteLimits bound the quote server: a quote is one envelope.
var QuoteLimits = StreamLimits{
	Service: "idlegrid.quote", Memory: market.MaxEnvelopeSize,
	Request: requestDeadline, Deadline: quoteDeadline, PerPeer: 4, Rate: Rate{10, 50},
}

// ServeQuotes hands every quote envelope received to handle, which
// verifies it. One envelope per stream, at most market.MaxEnvelopeSize.
func ServeQuotes(sv Server, handle func(from peer.ID, env []byte)) {
	sv.Serve(QuoteProtocol, QuoteLimits, func(_ context.Context, from peer.ID, s network.Stream) error {
		env, err := msgio.NewVarintReaderSize(s, market.MaxEnvelopeSize).ReadMsg()
		if err != nil {
			return err
		}
		handle(from, env)
		return nil
	})
}

// SendQuote delivers a signed quote envelope to the renter to, and
// returns once the renter has read it: the server closes the stream
// after reading and resets it when it failed. (Closing at once instead
// races the server's close, and fails on QUIC for a quote delivered.)
func SendQuote(ctx context.Context, h host.Host, sw Swarm, to peer.ID, env []byte) error {
	ctx, cancel := context.WithTimeout(ctx, quoteDeadline)
	defer cancel()
	s, err := dial(ctx, h, sw, to, QuoteProtocol)
	if err != nil {
		return fmt.Errorf("send quote to %s: %w", to, err)
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	if err := msgio.NewVarintWriter(s).WriteMsg(env); err != nil {
		s.Reset()
		return fmt.Errorf("send quote to %s: %w", to, err)
	}
	s.CloseWrite()
	switch _, err := s.Read(make([]byte, 1)); {
	case err == nil:
		s.Reset()
		return fmt.Errorf("send quote to %s: the renter answered, where it closes", to)
	case !errors.Is(err, io.EOF):
		s.Reset()
		return fmt.Errorf("send quote to %s: not read: %w", to, err)
	}
	return nil
}
