package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// digestOffer is a signed offer with its issuer and ID.
type digestOffer struct {
	issuer peer.ID
	id     string
	env    []byte
}

// digestBook is n signed offers of 10 issuers at sequence number seq,
// each padded with an image pattern of pad bytes.
func digestBook(t testing.TB, n int, seq uint64, pad int) []digestOffer {
	t.Helper()
	var keys []crypto.PrivKey
	for range 10 {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	out := make([]digestOffer, n)
	for i := range out {
		k := keys[i%len(keys)]
		id, _ := peer.IDFromPrivateKey(k)
		oid := fmt.Sprint("o", i)
		o := &pb.Offer{Header: &pb.Header{Version: market.Version, Issuer: []byte(id), Id: oid, Seq: seq}, PriceMicros: 1_000_000}
		if pad > 0 {
			o.ImageAllow = []string{string(make([]byte, pad))}
		}
		env, err := market.Sign(k, o)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = digestOffer{id, oid, env}
	}
	return out
}

// bookServer is a host that serves book's envelopes on both book-sync
// protocols until the test ends.
func bookServer(t testing.TB, book []digestOffer) host.Host {
	server := newTestHost(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	envs := make([][]byte, len(book))
	for i, o := range book {
		envs[i] = o.env
	}
	ServeBookSync(Server{Host: server, Ctx: ctx}, func(context.Context) ([][]byte, error) { return envs, nil })
	return server
}

// bookPeers is a bookServer of book and an asker connected to it over
// transport, once the asker has identified the server, with a context
// for the test.
func bookPeers(t *testing.T, book []digestOffer, transport string) (server, asker host.Host, ctx context.Context) {
	server, asker = bookServer(t, book), newTestHost(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	wait := identified(t, asker)
	connectOver(t, asker, server, transport)
	wait(server.ID(), BookDigestProtocol)
	return server, asker, ctx
}

// A resync that sends a digest of what the asker holds gets only what
// it lacks: of a book of 100 offers at sequence number 2, an asker that
// holds 80 of them at 2, 10 at 1 and not the last 10 gets those 20, and
// one that holds all 100 gets none; over TCP and QUIC.
func TestABookDigestSyncSendsOnlyWhatTheAskerLacks(t *testing.T) {
	book := digestBook(t, 100, 2, 0)
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			server, asker, ctx := bookPeers(t, book, transport)

			var held BookDigest
			for i, o := range book[:90] {
				held.Add(o.issuer, o.id, map[bool]uint64{true: 2, false: 1}[i < 80])
			}
			got := map[string]bool{}
			n, err := FetchBook(ctx, asker, Swarm{}, server.ID(), &held, func(env []byte) {
				_, id, _, _ := market.ClaimedOffer(env)
				got[id] = true
			})
			if err != nil || n != 20 || len(got) != 20 {
				t.Fatalf("holding 80 of 100 and 10 older: got %d offers (%d distinct), %v; want the 20 it lacks", n, len(got), err)
			}
			for _, o := range book[80:] {
				if !got[o.id] {
					t.Errorf("%s, which the asker lacks or holds older, was not sent", o.id)
				}
			}

			var all BookDigest
			for _, o := range book {
				all.Add(o.issuer, o.id, 2)
			}
			n, err = FetchBook(ctx, asker, Swarm{}, server.ID(), &all, func([]byte) {})
			if err != nil || n != 0 {
				t.Errorf("holding the whole book: got %d offers, %v; want none", n, err)
			}
		})
	}
}

// A node of the last version serves only BookSyncProtocol: an asker with
// a digest asks it that way and gets the whole book.
func TestAServerOfTheLastVersionSendsTheWholeBook(t *testing.T) {
	book := digestBook(t, 30, 1, 0)
	server, asker := bookServer(t, book), newTestHost(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server.RemoveStreamHandler(Swarm{}.Protocol(BookDigestProtocol))
	server.RemoveStreamHandler(Swarm{}.Protocol(BookShardsProtocol))
	if err := connect(asker, server); err != nil {
		t.Fatal(err)
	}
	servedAs(t, asker, server.ID(), []protocol.ID{BookSyncProtocol}, []protocol.ID{BookDigestProtocol, BookShardsProtocol})
	var held BookDigest
	for _, o := range book {
		held.Add(o.issuer, o.id, 1)
	}
	n, err := FetchBook(ctx, asker, Swarm{}, server.ID(), &held, func([]byte) {})
	if err != nil || n != len(book) {
		t.Errorf("from a server of the last version: %d offers, %v; want the whole book of %d", n, err, len(book))
	}
}

// An asker whose peerstore lists only the last version's protocol for a
// server that serves the digest (the identify push that told of it was
// lost: a receiver takes only 10 pushes, then one in 5 s, from each /24)
// asks for the digest first, and a resync of a book it holds whole
// carries nothing; over TCP and QUIC. Before, it took the protocol its
// peerstore listed, and every resync carried the whole book.
func TestAnAskerThatMissedTheDigestProtocolAsksForItStill(t *testing.T) {
	book := digestBook(t, 50, 1, 0)
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			server, asker, ctx := bookPeers(t, book, transport)
			newer := []protocol.ID{Swarm{}.Protocol(BookDigestProtocol), Swarm{}.Protocol(BookShardsProtocol)}
			if err := asker.Peerstore().RemoveProtocols(server.ID(), newer...); err != nil {
				t.Fatal(err)
			}
			if ok, _ := asker.Peerstore().SupportsProtocols(server.ID(), newer...); len(ok) > 0 {
				t.Fatalf("the asker's peerstore still lists %v", ok)
			}
			var all BookDigest
			for _, o := range book {
				all.Add(o.issuer, o.id, 1)
			}
			n, err := FetchBook(ctx, asker, Swarm{}, server.ID(), &all, func([]byte) {})
			if err != nil || n != 0 {
				t.Errorf("holding the whole book, its server unlisted for the digest: got %d offers, %v; want none", n, err)
			}
			if err := asker.Peerstore().RemoveProtocols(server.ID(), newer...); err != nil {
				t.Fatal(err)
			}
			n, err = FetchShards(ctx, asker, Swarm{}, server.ID(), []string{"h100"}, &all, func([]byte) {})
			if err != nil || n != 0 {
				t.Errorf("holding the whole book, of a shard: got %d offers, %v; want none", n, err)
			}
		})
	}
}

// A digest is bounded as the book is: a request of MaxSyncOffers entries
// is answered, one of more is refused (the stream reset) before any
// entry is read, and nothing is sent, though every entry follows.
func TestABookDigestPastItsBoundIsRefused(t *testing.T) {
	book := digestBook(t, 10, 1, 0)
	server, asker := bookServer(t, book), newTestHost(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := connect(asker, server); err != nil {
		t.Fatal(err)
	}
	for _, entries := range []int{MaxSyncOffers, MaxSyncOffers + 1} {
		s, err := asker.NewStream(ctx, server.ID(), Swarm{}.Protocol(BookDigestProtocol))
		if err != nil {
			t.Fatal(err)
		}
		req := binary.AppendUvarint(binary.AppendUvarint(nil, 100), uint64(entries))
		// Entries that hold nothing of the book. The server may reset
		// the stream before all of them are written.
		s.Write(append(req, make([]byte, entries*DigestEntrySize)...))
		s.CloseWrite()
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := readBook(s, func([]byte) {})
		if entries <= MaxSyncOffers && (n != len(book) || err != nil) {
			t.Errorf("a digest of %d entries: %d offers back, %v; want the whole book of %d", entries, n, err, len(book))
		}
		if entries > MaxSyncOffers && (n > 0 || err == nil) {
			t.Errorf("a digest of %d entries: %d offers back, err %v; want the stream reset, nothing sent", entries, n, err)
		}
		s.Close()
	}
}

// servedAs waits, up to 10 s, until h's peerstore says p serves each of
// yes and none of no. A host's identify answers from a snapshot of its
// protocols that it updates after a handler is set or removed, and
// pushes the change to its peers: a peer that connects to a host just
// built may first hear of an older set.
func servedAs(t testing.TB, h host.Host, p peer.ID, yes, no []protocol.ID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for _, id := range yes {
			if got, _ := h.Peerstore().SupportsProtocols(p, Swarm{}.Protocol(id)); len(got) == 0 {
				ok = false
			}
		}
		for _, id := range no {
			if got, _ := h.Peerstore().SupportsProtocols(p, Swarm{}.Protocol(id)); len(got) > 0 {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("identify did not say within 10 s that %s serves %v and not %v", p, yes, no)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// identified returns a wait for identify to have run between h and
// the peer it connects to next; subscribe before connecting. The wait
// then waits for identify to say that peer serves id (servedAs).
func identified(t testing.TB, h host.Host) func(p peer.ID, id protocol.ID) {
	t.Helper()
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return func(p peer.ID, id protocol.ID) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e := <-sub.Out():
				if e.(event.EvtPeerIdentificationCompleted).Peer != p {
					continue
				}
			case <-timeout:
				t.Fatalf("identify with %s did not complete in 10 s", p)
			}
			break
		}
		servedAs(t, h, p, []protocol.ID{id}, nil)
	}
}

// BenchmarkBookResync measures a resync between two books that agree, of
// 10,000 offers of about a real signed offer's size (0.5 KB): the bytes
// that cross with a digest, and as the reference those of the whole book
// (BookSyncProtocol, what every resync sent before), counted in the same
// run. It reports both per offer and their ratio.
//
//	go test ./p2p -run '^$' -bench BookResync -benchtime 5x
func BenchmarkBookResync(b *testing.B) {
	const n = 10_000
	book := digestBook(b, n, 1, 300)
	server := bookServer(b, book)
	ctx := context.Background()
	// What crossed: the request, and each envelope with its length
	// prefix. Each fetch is a fresh peer's, within the server's rates.
	fetch := func(held *BookDigest) float64 {
		asker := newTestHost(b, nil, nil)
		defer asker.Close()
		wait := identified(b, asker)
		if err := connect(asker, server); err != nil {
			b.Fatal(err)
		}
		wait(server.ID(), BookDigestProtocol)
		req := len(binary.AppendUvarint(nil, MaxSyncOffers))
		if held != nil {
			req += len(binary.AppendUvarint(nil, uint64(held.Len()))) + held.Len()*DigestEntrySize
		}
		got := 0
		if _, err := FetchBook(ctx, asker, Swarm{}, server.ID(), held, func(env []byte) {
			got += len(binary.AppendUvarint(nil, uint64(len(env)))) + len(env)
		}); err != nil {
			b.Fatal(err)
		}
		return float64(req + got)
	}
	whole := fetch(nil)
	var held BookDigest
	for _, o := range book {
		held.Add(o.issuer, o.id, 1)
	}
	var digest float64
	for range b.N {
		digest = fetch(&held)
	}
	b.ReportMetric(whole/n, "whole-B/offer")
	b.ReportMetric(digest/n, "digest-B/offer")
	b.ReportMetric(digest/whole, "digest/whole")
}

// Whatever a peer sends as a digest, readDigest reads at most
// MaxSyncOffers entries, never more than it was sent, and what it
// returns answers holds without a panic.
func FuzzReadDigest(f *testing.F) {
	var d BookDigest
	d.Add("issuer", "o1", 3)
	f.Add(append(binary.AppendUvarint(nil, 1), d.b...))
	f.Add(binary.AppendUvarint(nil, MaxSyncOffers+1))
	f.Add(binary.AppendUvarint(nil, 1<<40))
	f.Add([]byte{})
	env := digestBook(f, 1, 1, 0)[0].env
	f.Fuzz(func(t *testing.T, data []byte) {
		table, err := readDigest(bytes.NewReader(data))
		if err != nil {
			return
		}
		if table.Len() > MaxSyncOffers || len(table) > len(data) {
			t.Fatalf("a digest of %d entries (%d bytes) from %d bytes", table.Len(), len(table), len(data))
		}
		table.holds(env)
	})
}
