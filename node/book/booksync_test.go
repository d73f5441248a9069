package book

import (
	"context"
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
}

func (f *fetchLog) FetchBook(_ context.Context, _ peer.ID, _ func([]byte)) (int, error) {
	f.mu.Lock()
	f.at = append(f.at, f.clk.Now())
	f.mu.Unlock()
	f.got <- struct{}{}
	return 0, nil
}
func (f *fetchLog) FetchEvidence(context.Context, peer.ID, func([]byte)) (int, error) { return 0, nil }
func (f *fetchLog) SyncPeers() []peer.ID                                              { return []peer.ID{f.peer} }

// A node that synced a peer's book when the peer joined does not sync it
// again for resyncFresh: its periodic resync (first at 5 s, doubling)
// passes over it until then. A one-shot command thus takes one sync of a
// provider's per-peer budget (three in a row, then one each 10 s), not
// three, and the next command of its repository finds one left.
func TestAPeerSyncedOnJoinIsNotResyncedWhileFresh(t *testing.T) {
	clk := clock.NewFake()
	f := &fetchLog{clk: clk, peer: "provider", got: make(chan struct{}, 4)}
	store := dssync.MutexWrap(ds.NewMapDatastore())
	m := New(Deps{Net: f, Store: store, Clock: clk, Log: slog.New(slog.DiscardHandler), Limits: market.DefaultLimits()})
	ctx, cancel := context.WithCancel(context.Background())
	joins, gone := make(chan peer.ID), make(chan peer.ID)
	m.wg.Add(1)
	go m.syncBooks(ctx, joins, gone)
	defer func() { cancel(); m.wg.Wait() }()

	joins <- f.peer
	<-f.got
	// Step the clock a second at a time until the peer is synced again.
	for i := 0; ; i++ {
		if i == 120 {
			t.Fatal("no resync of the peer within 120 s of clock")
		}
		clk.Advance(time.Second)
		select {
		case <-f.got:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if gap := f.at[1].Sub(f.at[0]); gap < resyncFresh {
		t.Errorf("the peer synced on join was synced again %s later; want none for %s", gap.Round(time.Second), resyncFresh)
	}
}
