package p2p

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SendQuote returns nil exactly when the renter read the quote, over QUIC
// as over TCP (where closing at once used to race the renter's close and
// fail on QUIC for a quote delivered), and an error when the renter
// refused it unread (one over the size limit).
func TestSendQuoteSaysWhetherTheRenterReadIt(t *testing.T) {
	for _, transport := range []string{"quic-v1", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			provider, renter := newTestHost(t, nil, nil), newTestHost(t, nil, nil)
			connectOver(t, provider, renter, transport)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make(chan []byte, 1)
			ServeQuotes(Server{Host: renter, Ctx: context.Background()}, func(_ peer.ID, env []byte) { got <- env })
			quote := []byte("a signed quote")
			for range 20 { // the race lost on most tries
				if err := SendQuote(ctx, provider, Swarm{}, renter.ID(), quote); err != nil {
					t.Fatalf("a quote read by the renter: %v", err)
				}
				if env := <-got; !bytes.Equal(env, quote) {
					t.Fatalf("the renter read %q", env)
				}
			}
			if err := SendQuote(ctx, provider, Swarm{}, renter.ID(), make([]byte, market.MaxEnvelopeSize+1)); err == nil {
				t.Error("a quote the renter refused unread was sent")
			}
		})
	}
}
