package book

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/clock"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p/core/peer"
)

// fetchLog is a Syncer with one peer that notes when (on its clock) each
// book was fetched.
type fetchLog struct {
	clk  clock.Clock
	peer peer.ID
	mu   sync.Mutex
	at   []time.Time
	got  chan struct{}
	fail int // the first fail fetches fail
}

func (f *fetchLog) FetchBook(_ context.Context, _ peer.ID, _ func([]byte)) (int, error) {
	f.mu.Lock()
	f.at = append(f.at, f.clk.Now())
	failed := len(f.at) <= f.fail
	f.mu.Unlock()
	f.got <- struct{}{}
	if failed {
		return 0, errors.New("the peer opens streams of this protocol too fast")
	}
	return 0, nil
}

// awaitNext steps the clock a second at a time until the next fetch.
func (f *fetchLog) awaitNext(t *testing.T, clk *clock.Fake) {
	t.Helper()
	for range 120 {
		clk.Advance(time.Second)
		select {
		case <-f.got:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("no resync of the peer within 120 s of clock")
}
func (f *fetchLog) FetchEvidence(context.Context, peer.ID, func([]byte)) (int, error) { return 0, nil }
func (f *fetchLog) SyncPeers() []peer.ID                                              { return []peer.ID{f.peer} }

// resyncGap runs a market's book sync with one peer whose first fail
// syncs fail, has the peer join, and returns how long after that first
// sync (on the clock) the sync loop fetched its book again.
func resyncGap(t *testing.T, fail int) time.Duration {
	t.Helper()
	clk := clock.NewFake()
	f := &fetchLog{clk: clk, peer: "provider", got: make(chan struct{}, 4), fail: fail}
	store := dssync.MutexWrap(ds.NewMapDatastore())
	m := New(Deps{Net: f, Store: store, Clock: clk, Log: slog.New(slog.DiscardHandler), Limits: market.DefaultLimits()})
	ctx, cancel := context.WithCancel(context.Background())
	joins, gone := make(chan peer.ID), make(chan peer.ID)
	m.wg.Add(1)
	go m.syncBooks(ctx, joins, gone)
	defer func() { cancel(); m.wg.Wait() }()
	joins <- f.peer
	<-f.got
	f.awaitNext(t, clk)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[1].Sub(f.at[0])
}

// A node that synced a peer's book when the peer joined does not sync it
// again for resyncFresh: its periodic resync (first at 5 s, doubling)
// passes over it until then. A one-shot command thus takes one sync of a
// provider's per-peer budget (three in a row, then one each 10 s), not
// three, and the next command of its repository finds one left.
func TestAPeerSyncedOnJoinIsNotResyncedWhileFresh(t *testing.T) {
	if gap := resyncGap(t, 0); gap < resyncFresh {
		t.Errorf("the peer synced on join was synced again %s later; want none for %s", gap.Round(time.Second), resyncFresh)
	}
}

// A sync that failed does not count: the resync tries the peer again at
// its next turn (5 s), rather than waiting as if its book were fresh.
func TestAFailedSyncIsTriedAgainAtTheNextResync(t *testing.T) {
	if gap := resyncGap(t, 1); gap >= resyncFresh {
		t.Errorf("a peer whose sync failed was tried again %s later; want at the next resync", gap.Round(time.Second))
	}
}
