package data

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bsmsg "github.com/ipfs/boxo/bitswap/message"
	bspb "github.com/ipfs/boxo/bitswap/message/pb"
	bsnetwork "github.com/ipfs/boxo/bitswap/network"
	"github.com/ipfs/boxo/bitswap/network/bsnet"
	"github.com/ipfs/boxo/blockstore"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mh "github.com/multiformats/go-multihash"
)

const testPrefix = protocol.ID("/idlegrid/test")

var transports = []struct{ name, listen string }{
	{"tcp", "/ip4/127.0.0.1/tcp/0"},
	{"quic", "/ip4/127.0.0.1/udp/0/quic-v1"},
}

// overTransports runs f once over TCP and once over QUIC.
func overTransports(t *testing.T, f func(t *testing.T, listen string)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.listen) })
	}
}

type peerNode struct {
	h host.Host
	s *Store
	x *Exchange
}

func newPeer(t *testing.T, listen string, limits ExchangeLimits) *peerNode {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings(listen))
	if err != nil {
		t.Fatal(err)
	}
	s := Open(dssync.MutexWrap(ds.NewMapDatastore()), 1<<30, nil)
	x := s.StartExchange(context.Background(), ExchangeConfig{Host: h, Prefix: testPrefix, Limits: limits})
	t.Cleanup(func() { x.Close(); h.Close() })
	return &peerNode{h: h, s: s, x: x}
}

func link(t *testing.T, a, b *peerNode) {
	t.Helper()
	if err := a.h.Connect(context.Background(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// sampleTree writes a folder of n random files of size bytes each and
// returns it with each file's SHA-256.
func sampleTree(t *testing.T, n, size int) (string, map[string][32]byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "set")
	sums := map[string][32]byte{}
	for i := range n {
		b := make([]byte, size)
		rand.Read(b)
		name := filepath.Join("part", string(rune('a'+i))+".bin")
		if err := os.MkdirAll(filepath.Join(dir, "part"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sums[name] = sha256.Sum256(b)
	}
	return dir, sums
}

func checkExport(t *testing.T, s *Store, c cid.Cid, sums map[string][32]byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	if err := s.Export(context.Background(), c, out); err != nil {
		t.Fatal(err)
	}
	for name, want := range sums {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(b) != want {
			t.Fatalf("%s: its SHA-256 differs from the file added", name)
		}
	}
}

// dropSome deletes every other leaf block of c from s's blockstore (odd
// or even ones), leaving s a part of the dataset.
func dropSome(t *testing.T, s *Store, c cid.Cid, odd bool) {
	t.Helper()
	var leaves []cid.Cid
	if _, _, err := s.walk(context.Background(), c, func(b cid.Cid) {
		if b.Type() == cid.Raw {
			leaves = append(leaves, b)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for i, b := range leaves {
		if (i%2 == 1) == odd {
			if err := s.bs.DeleteBlock(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.d.Delete(context.Background(), indexPrefix.ChildString(c.String())); err != nil {
		t.Fatal(err)
	}
}

func TestFetchFromTwoHoldersThatEachHoldPart(t *testing.T) {
	overTransports(t, func(t *testing.T, listen string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir, sums := sampleTree(t, 4, 3<<20+4321)
		a, b, c := newPeer(t, listen, DefaultExchangeLimits), newPeer(t, listen, DefaultExchangeLimits), newPeer(t, listen, DefaultExchangeLimits)
		da, err := a.s.Add(ctx, dir, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.s.Add(ctx, dir, false); err != nil {
			t.Fatal(err)
		}
		root := cid.MustParse(da.CID)
		// Neither holds it whole: the fetch must take from both.
		dropSome(t, a.s, root, true)
		dropSome(t, b.s, root, false)
		link(t, c, a)
		link(t, c, b)
		var last Progress
		d, err := c.x.Fetch(ctx, root, da.Bytes, []peer.ID{a.h.ID(), b.h.ID()}, func(p Progress) { last = p })
		if err != nil {
			t.Fatal(err)
		}
		if d.Bytes != da.Bytes || d.Blocks != da.Blocks || d.Pinned {
			t.Fatalf("fetched %+v, added %+v: want the same bytes and blocks, cached", d, da)
		}
		if last.Bytes != da.Bytes || last.Holders != 2 {
			t.Fatalf("progress ended at %d bytes from %d holders; the dataset holds %d, each holder part", last.Bytes, last.Holders, da.Bytes)
		}
		checkExport(t, c.s, root, sums)
		if got, err := c.s.Get(ctx, root); err != nil || got.CID != da.CID {
			t.Fatalf("the fetched dataset is not listed: %v", err)
		}
		// Kept now: a second fetch needs no peer.
		if _, err := c.x.Fetch(ctx, root, da.Bytes, nil, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// lyingStore answers every block with other bytes of the same length.
type lyingStore struct{ blockstore.Blockstore }

func (l lyingStore) Get(ctx context.Context, c cid.Cid) (blocks.Block, error) {
	b, err := l.Blockstore.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	bad := bytes.Clone(b.RawData())
	bad[0] ^= 0xff
	return blocks.NewBlockWithCid(bad, c)
}

func TestALyingHolderIsCaughtAndNothingItSentIsKept(t *testing.T) {
	overTransports(t, func(t *testing.T, listen string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir, sums := sampleTree(t, 2, 2<<20)
		limits := DefaultExchangeLimits
		limits.Stall = 3 * time.Second
		// The liar's blocks are its store's, each answered falsely.
		lh, err := libp2p.New(libp2p.ListenAddrStrings(listen))
		if err != nil {
			t.Fatal(err)
		}
		ls := Open(dssync.MutexWrap(ds.NewMapDatastore()), 1<<30, nil)
		dl, err := ls.Add(ctx, dir, false)
		if err != nil {
			t.Fatal(err)
		}
		ls.bs = lyingStore{ls.bs}
		lx := ls.StartExchange(context.Background(), ExchangeConfig{Host: lh, Prefix: testPrefix, Limits: limits})
		t.Cleanup(func() { lx.Close(); lh.Close() })
		liar := &peerNode{h: lh, s: ls, x: lx}

		honest, c := newPeer(t, listen, limits), newPeer(t, listen, limits)
		if _, err := honest.s.Add(ctx, dir, false); err != nil {
			t.Fatal(err)
		}
		var caught []peer.ID
		var mu sync.Mutex
		c.x.cfg.Fault = func(p peer.ID, _ string) { mu.Lock(); caught = append(caught, p); mu.Unlock() }
		root := cid.MustParse(dl.CID)
		link(t, c, liar)
		_, err = c.x.Fetch(ctx, root, dl.Bytes, []peer.ID{liar.h.ID()}, nil)
		if !errors.Is(err, ErrStalled) {
			t.Fatalf("fetching from the liar alone: %v, want %v", err, ErrStalled)
		}
		if !c.x.Faulty(liar.h.ID()) || c.x.Faults() != 1 {
			t.Fatalf("the liar is faulty: %v, faults %d: want true and 1", c.x.Faulty(liar.h.ID()), c.x.Faults())
		}
		mu.Lock()
		if len(caught) != 1 || caught[0] != liar.h.ID() {
			t.Fatalf("told of faults by %v, want the liar %s", caught, liar.h.ID())
		}
		mu.Unlock()
		if l, err := c.s.List(ctx); err != nil || len(l) != 0 {
			t.Fatalf("after a failed fetch the store lists %v (%v), want nothing", l, err)
		}
		// With an honest holder beside it, the fetch completes, and what
		// the liar sends is never read.
		link(t, c, honest)
		if _, err := c.x.Fetch(ctx, root, dl.Bytes, []peer.ID{liar.h.ID(), honest.h.ID()}, nil); err != nil {
			t.Fatal(err)
		}
		checkExport(t, c.s, root, sums)
		if c.x.Faults() != 1 {
			t.Fatalf("faults %d, want the one", c.x.Faults())
		}
		// Nor is it served.
		if c.x.serves(liar.h.ID()) {
			t.Fatal("a faulty peer is still served")
		}
	})
}

func TestAFetchOverItsBoundIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, _ := sampleTree(t, 3, 1<<20)
	a, c := newPeer(t, transports[0].listen, DefaultExchangeLimits), newPeer(t, transports[0].listen, DefaultExchangeLimits)
	d, err := a.s.Add(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	link(t, c, a)
	root := cid.MustParse(d.CID)
	// The renter said less than the dataset holds.
	if _, err := c.x.Fetch(ctx, root, 2<<20, []peer.ID{a.h.ID()}, nil); !errors.Is(err, ErrTooBig) {
		t.Fatalf("a dataset past its named bytes: %v, want %v", err, ErrTooBig)
	}
	if l, err := c.s.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("the store lists %v (%v), want nothing", l, err)
	}
	// More than the cache may hold is refused before a byte moves.
	if _, err := c.x.Fetch(ctx, root, 2<<30, []peer.ID{a.h.ID()}, nil); !errors.Is(err, ErrTooBig) {
		t.Fatalf("a dataset past the cache: %v, want %v", err, ErrTooBig)
	}
}

// recorder is a bitswap receiver that keeps the blocks it is sent.
type recorder struct {
	mu  sync.Mutex
	got map[cid.Cid]bool
	new chan struct{}
}

func (r *recorder) ReceiveMessage(_ context.Context, _ peer.ID, m bsmsg.BitSwapMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range m.Blocks() {
		r.got[b.Cid()] = true
	}
	select {
	case r.new <- struct{}{}:
	default:
	}
}
func (r *recorder) ReceiveError(error)       {}
func (r *recorder) PeerConnected(peer.ID)    {}
func (r *recorder) PeerDisconnected(peer.ID) {}

func randomCID(t *testing.T) cid.Cid {
	b := make([]byte, 32)
	rand.Read(b)
	h, err := mh.Sum(b, mh.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return cid.NewCidV1(cid.Raw, h)
}

func TestAFloodOfWantsIsHeldToThePeersBound(t *testing.T) {
	overTransports(t, func(t *testing.T, listen string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		limits := DefaultExchangeLimits
		limits.PeerWants = 256
		server := newPeer(t, listen, limits)
		dir, sums := sampleTree(t, 1, 1<<20)
		d, err := server.s.Add(ctx, dir, false)
		if err != nil {
			t.Fatal(err)
		}
		root := cid.MustParse(d.CID)
		ah, err := libp2p.New(libp2p.ListenAddrStrings(listen))
		if err != nil {
			t.Fatal(err)
		}
		defer ah.Close()
		anet := bsnet.NewFromIpfsHost(ah, bsnet.Prefix(testPrefix), bsnet.SupportedProtocols([]protocol.ID{bsnet.ProtocolBitswap}))
		rec := &recorder{got: map[cid.Cid]bool{}, new: make(chan struct{}, 1)}
		anet.Start(rec)
		defer anet.Stop()
		if err := ah.Connect(ctx, peer.AddrInfo{ID: server.h.ID(), Addrs: server.h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		sender, err := anet.NewMessageSender(ctx, server.h.ID(), &bsnetwork.MessageSenderOpts{MaxRetries: 1, SendTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// 20 times the bound of wants for blocks nobody has, then one for
		// a block the server keeps, in order on one stream.
		for range 5 {
			m := bsmsg.New(false)
			for range 1024 {
				m.AddEntry(randomCID(t), 1, bspb.Message_Wantlist_Block, true)
			}
			if err := sender.SendMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		m := bsmsg.New(false)
		m.AddEntry(root, 100, bspb.Message_Wantlist_Block, true)
		if err := sender.SendMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		for {
			rec.mu.Lock()
			got := rec.got[root]
			rec.mu.Unlock()
			if got {
				break
			}
			select {
			case <-rec.new:
			case <-ctx.Done():
				t.Fatal("the want for a kept block was not served after the flood")
			}
		}
		if n := len(server.x.bsw.WantlistForPeer(ah.ID())); n > int(limits.PeerWants) {
			t.Fatalf("the server keeps %d wants of the flooding peer, bound %d", n, limits.PeerWants)
		}
		// An honest peer is served meanwhile.
		c := newPeer(t, listen, limits)
		link(t, c, server)
		if _, err := c.x.Fetch(ctx, root, d.Bytes, []peer.ID{server.h.ID()}, nil); err != nil {
			t.Fatal(err)
		}
		checkExport(t, c.s, root, sums)
	})
}

func TestTheExchangeServesOnlyThosePeersItMay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limits := DefaultExchangeLimits
	limits.Stall = 2 * time.Second
	h, err := libp2p.New(libp2p.ListenAddrStrings(transports[0].listen))
	if err != nil {
		t.Fatal(err)
	}
	s := Open(dssync.MutexWrap(ds.NewMapDatastore()), 1<<30, nil)
	var allowed sync.Map
	x := s.StartExchange(context.Background(), ExchangeConfig{Host: h, Prefix: testPrefix, Limits: limits,
		Serve: func(p peer.ID) bool { _, ok := allowed.Load(p); return ok }})
	t.Cleanup(func() { x.Close(); h.Close() })
	server := &peerNode{h: h, s: s, x: x}
	dir, sums := sampleTree(t, 1, 1<<20)
	d, err := s.Add(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	root := cid.MustParse(d.CID)
	c := newPeer(t, transports[0].listen, limits)
	link(t, c, server)
	if _, err := c.x.Fetch(ctx, root, d.Bytes, []peer.ID{h.ID()}, nil); !errors.Is(err, ErrStalled) {
		t.Fatalf("a peer not served: %v, want %v", err, ErrStalled)
	}
	allowed.Store(c.h.ID(), true)
	if _, err := c.x.Fetch(ctx, root, d.Bytes, []peer.ID{h.ID()}, nil); err != nil {
		t.Fatal(err)
	}
	checkExport(t, c.s, root, sums)
}

func TestFetchesBeyondTheBoundWaitTheirTurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limits := DefaultExchangeLimits
	limits.Fetches, limits.Stall = 1, 3*time.Second
	a, c := newPeer(t, transports[0].listen, limits), newPeer(t, transports[0].listen, limits)
	dir1, _ := sampleTree(t, 1, 1<<20)
	dir2, _ := sampleTree(t, 1, 1<<20)
	d1, err := a.s.Add(ctx, dir1, false)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := a.s.Add(ctx, dir2, false)
	if err != nil {
		t.Fatal(err)
	}
	link(t, c, a)
	// The first fetch names no holder: it holds the one slot till it stalls.
	first := make(chan error, 1)
	go func() {
		_, err := c.x.Fetch(ctx, cid.MustParse(d1.CID), d1.Bytes, nil, nil)
		first <- err
	}()
	for len(c.x.slots) == 0 {
		select {
		case err := <-first:
			t.Fatalf("the first fetch ended first: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := c.x.Fetch(short, cid.MustParse(d2.CID), d2.Bytes, []peer.ID{a.h.ID()}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fetch past the bound of 1: %v, want it to wait its turn till its deadline", err)
	}
	if err := <-first; !errors.Is(err, ErrStalled) {
		t.Fatalf("the first fetch: %v, want %v", err, ErrStalled)
	}
	// With the slot free, it runs.
	if _, err := c.x.Fetch(ctx, cid.MustParse(d2.CID), d2.Bytes, []peer.ID{a.h.ID()}, nil); err != nil {
		t.Fatal(err)
	}
}
