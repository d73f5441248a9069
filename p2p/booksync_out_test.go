package p2p

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 26, attack 10: a hundred fresh peers pulled 89 MB of book in 7 s
// with requests of a few bytes. The book-sync server now charges what it
// sends to the asker's byte budget and to all askers' together
// (SyncOutRates): many fresh peers pulling at once get, together, the
// whole budget's burst and its rate for as long as they pull, and no
// more; each still gets something or a clean end.
func TestManyFreshPeersPullNoMoreThanTheSyncBudget(t *testing.T) {
	server := newTestHost(t, nil, nil)
	book := make([][]byte, 2000)
	for i := range book {
		book[i] = bytes.Repeat([]byte{byte(i)}, 2<<10) // 4 MB in all
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ServeBookSync(Server{Host: server, Ctx: ctx}, func(context.Context) ([][]byte, error) { return book, nil })

	const peers = 30
	var got atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan error, peers)
	for range peers {
		h := newTestHost(t, nil, nil)
		if err := connect(h, server); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := FetchBook(ctx, h, Swarm{}, server.ID(), nil, func(env []byte) { got.Add(int64(len(env))) }); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a pull ended with an error rather than what the budget allows: %v", err)
	}
	all := SyncOutRates.All
	most := all.Burst + all.PerSecond*time.Since(start).Seconds() + float64(peers*len(book[0]))
	if float64(got.Load()) > most {
		t.Errorf("%d fresh peers pulled %.1f MB in %s; the budget allows %.1f MB", peers, float64(got.Load())/1e6, time.Since(start).Round(time.Millisecond), most/1e6)
	}
	t.Logf("%d fresh peers pulled %.1f MB in %s", peers, float64(got.Load())/1e6, time.Since(start).Round(time.Millisecond))

	// One peer asking again at once is held to its own budget.
	h := newTestHost(t, nil, nil)
	if err := connect(h, server); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var n atomic.Int64
		if _, err := FetchBook(ctx, h, Swarm{}, server.ID(), nil, func(env []byte) { n.Add(int64(len(env))) }); err != nil {
			t.Fatalf("pull %d: %v", i, err)
		}
		if i > 0 && float64(n.Load()) > SyncOutRates.PerPeer.PerSecond*10+float64(len(book[0])) {
			t.Errorf("pull %d by one peer got %s at once after a whole book", i, fmt.Sprint(n.Load()))
		}
	}
}
