package p2p

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// SeedsProtocol hands a peer the trust seeds this node's operator chose
// (reputation.seeds): the peers whose view of the swarm it adopts. A new
// node that chose none adopts its bootstrap peers' choices, as it adopts
// its way into the swarm from them. The asking peer sends nothing; the
// server answers with at most MaxSeedsReply peer IDs, each
// length-prefixed, then closes.
const SeedsProtocol protocol.ID = "/idlegrid/seeds/1.0.0"

// Limits of one seeds exchange.
const (
	// MaxSeedsReply bounds the seeds of one answer.
	MaxSeedsReply = 32
	// maxSeedSize bounds one seed's bytes: a peer ID.
	maxSeedSize = 128
	// SeedsDeadline bounds a whole exchange, either side.
	SeedsDeadline = 5 * time.Second
)

// SeedLimits bound the seeds server: a small answer, a few a minute.
var SeedLimits = StreamLimits{
	Service: "idlegrid.seeds", Memory: MaxSeedsReply*maxSeedSize + AnswerBuffer,
	Request: requestDeadline, Deadline: SeedsDeadline, PerPeer: 1, Rate: Rate{1, 10},
}

// ServeSeeds answers SeedsProtocol with seeds().
func ServeSeeds(sv Server, seeds func() []peer.ID) {
	sv.Serve(SeedsProtocol, SeedLimits, func(_ context.Context, _ peer.ID, s network.Stream) error {
		all := seeds()
		return writeAnswer(s, func(w msgio.Writer) error {
			for _, p := range all[:min(len(all), MaxSeedsReply)] {
				if err := w.WriteMsg([]byte(p)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// FetchSeeds asks p for its operator's trust seeds: at most
// MaxSeedsReply peer IDs; what is not one is left out.
func FetchSeeds(ctx context.Context, h host.Host, sw Swarm, p peer.ID) ([]peer.ID, error) {
	var out []peer.ID
	_, err := exchange(ctx, h, sw, p, SeedsProtocol, SeedsDeadline, nil, func(r io.Reader) (int, error) {
		return readCapped(r, maxSeedSize, MaxSeedsReply, 0, "seeds", func(b []byte) {
			if id, err := peer.IDFromBytes(b); err == nil {
				out = append(out, id)
			}
		})
	})
	if err != nil {
		return out, fmt.Errorf("seeds of %s: %w", p, err)
	}
	return out, nil
}
