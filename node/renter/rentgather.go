package renter

import (
	"context"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
)

// gather waits until the book holds offers that fit b, saying how many
// it holds, or until the gather time runs out.
func (r *Renter) gather(ctx context.Context, b *pb.Bid, req api.RentRequest, out RentOutput) error {
	wait := time.Duration(req.GatherMillis) * time.Millisecond
	if wait <= 0 {
		wait = defaultGather
	}
	deadline := r.Clock.Now().Add(wait)
	tick := r.Clock.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastSaid := time.Time{}
	// A bid for a family this node does not follow: its shard's offers
	// are fetched now, from those who follow it.
	asked := r.Market.Want(r.ctx, p2p.BidShards(b), gatherSyncs, r.use) > 0
	for {
		now := r.Clock.Now()
		snap := r.Market.Snapshot()
		if c := r.Market.MatcherFor(req.BidRequest).Match(snap, b, now, 1).Candidates; len(c) > 0 {
			synced := r.awaitSyncs(ctx)
			out.say("gathering offers: %d in the book, some fit (%d book syncs)", r.Market.Snapshot().Len(), synced)
			return nil
		}
		if now.After(deadline) {
			return &NoProviderError{Why: fmt.Sprintf("nothing fits after %s: %s", wait, r.Market.MatcherFor(req.BidRequest).Explain(snap, b, now).String())}
		}
		if !asked && r.Market.Synced() == 0 && now.Sub(deadline.Add(-wait)) >= gatherAsk {
			asked = true
			r.askBooks()
		}
		if now.Sub(lastSaid) >= time.Second {
			out.status("gathering offers: %d in the book, none fits yet: %s", snap.Len(), r.Market.MatcherFor(req.BidRequest).Explain(snap, b, now).String())
			lastSaid = now
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.ctx.Done():
			return owner.ErrClosed
		case <-tick.C():
		}
	}
}

// gatherAsk is how long a gather waits for a book sync to begin by
// itself (a peer that joins the offers topic is synced) before it asks
// for one.
const gatherAsk = time.Second

// askBooks syncs, in the background, the books of up to gatherSyncs of
// the peers a book can be synced from: a node whose gather saw no sync
// begin asks for them. A restarted renter's peer may not see it join
// the offers topic again until its old connection is known dead (a
// SIGKILLed process's QUIC connection, at its idle timeout): no join,
// no sync, and no offers for the whole gather.
func (r *Renter) askBooks() {
	peers := r.Market.SyncPeers()
	for _, p := range peers[:min(len(peers), gatherSyncs)] {
		done, err := r.use() // the renter's Stop waits for it
		if err != nil {
			return
		}
		go func() {
			defer done()
			r.Market.FetchBook(r.ctx, p)
		}()
	}
}

// awaitSyncs waits, at most gatherSettle, until the node has synced the
// books of gatherSyncs peers, or of every peer it could sync with if
// fewer: a book filled by one sync holds the first offers to arrive, not
// the nearest or the cheapest. Syncs are network events, so it waits in
// real time whatever the node's clock. It returns the syncs done.
func (r *Renter) awaitSyncs(ctx context.Context) int64 {
	want := int64(min(gatherSyncs, len(r.Market.SyncPeers())))
	give := time.NewTimer(gatherSettle)
	defer give.Stop()
	look := time.NewTicker(50 * time.Millisecond)
	defer look.Stop()
	for {
		if synced := r.Market.Synced(); synced >= want {
			return synced
		}
		select {
		case <-ctx.Done():
		case <-r.ctx.Done():
		case <-give.C:
		case <-look.C:
			continue
		}
		return r.Market.Synced()
	}
}
