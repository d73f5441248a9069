package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/boxo/bitswap"
	bsmsg "github.com/ipfs/boxo/bitswap/message"
	bsnetwork "github.com/ipfs/boxo/bitswap/network"
	"github.com/ipfs/boxo/bitswap/network/bsnet"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Holders finds the peers of the swarm that keep a dataset, and tells
// them this node keeps one: the swarm's DHT, whose records never leave
// the swarm.
type Holders interface {
	Provide(ctx context.Context, c cid.Cid, announce bool) error
	FindProvidersAsync(ctx context.Context, c cid.Cid, count int) <-chan peer.AddrInfo
}

// ExchangeLimits bound what the exchange serves and fetches.
type ExchangeLimits struct {
	// PeerQueueBytes bounds the block bytes queued for one peer at once.
	PeerQueueBytes int
	// PeerWants bounds the wants of one peer kept at once; more are
	// dropped, and a want for a block not kept here costs an answer.
	PeerWants uint
	// MessageBytes is the size a message of blocks aims at.
	MessageBytes int
	// Fetches bounds the datasets fetched at once; more wait their turn.
	Fetches int
	// InFlight bounds the blocks one fetch wants at once.
	InFlight int
	// Holders bounds the holders a fetch looks up, besides those named.
	Holders int
	// Stall ends a fetch for which no block came in that long.
	Stall time.Duration
	// Faulty bounds the peers remembered as having sent a false block.
	Faulty int
}

// DefaultExchangeLimits: 4 MiB queued for a peer, 1,024 wants a peer,
// 4 fetches of 32 blocks at a time, 8 holders looked up, a minute's stall.
var DefaultExchangeLimits = ExchangeLimits{
	PeerQueueBytes: 4 << 20, PeerWants: 1024, MessageBytes: 1 << 20,
	Fetches: 4, InFlight: 32, Holders: 8, Stall: time.Minute, Faulty: 4096,
}

// ExchangeConfig is what an exchange runs on.
type ExchangeConfig struct {
	Host host.Host
	// Prefix scopes the bitswap protocol to the swarm
	// (/idlegrid/<id>/ipfs/bitswap/1.2.0): only its peers speak it.
	Prefix protocol.ID
	// Holders finds and announces holders; nil: only the peers a fetch
	// names.
	Holders Holders
	// Serve says whether a peer is served at all; nil serves every peer
	// that speaks the swarm's protocol.
	Serve  func(peer.ID) bool
	Limits ExchangeLimits
	// Fault is told of a peer that sent a block no fetch wanted: bytes
	// that do not hash to any CID asked for. It is never sent anything
	// again, nor is anything it sends read.
	Fault func(p peer.ID, why string)
	Log   *slog.Logger
}

// Exchange fetches datasets' blocks from the swarm's peers and serves
// the blocks of the datasets this node keeps, over bitswap on the
// swarm's own host. Every block fetched is checked against its CID.
type Exchange struct {
	s     *Store
	cfg   ExchangeConfig
	net   bsnetwork.BitSwapNetwork
	bsw   *bitswap.Bitswap
	slots chan struct{}
	log   *slog.Logger

	mu      sync.Mutex
	wanted  map[string]int  // block hash → fetches that want it
	faulty  map[peer.ID]int // peers that sent a false block → order caught
	caught  int
	running map[string]*fetching // root → the fetch of it under way
	runs    map[*run]struct{}    // the fetches under way, told what arrives
	faults  atomic.Int64
}

type fetching struct {
	done chan struct{}
	d    Dataset
	err  error
}

// StartExchange runs the exchange of s's blocks on cfg.Host until Close.
func (s *Store) StartExchange(ctx context.Context, cfg ExchangeConfig) *Exchange {
	l := cfg.Limits
	if l == (ExchangeLimits{}) {
		l = DefaultExchangeLimits
	}
	cfg.Limits = l
	x := &Exchange{
		s: s, cfg: cfg, slots: make(chan struct{}, l.Fetches),
		log:    orLog(cfg.Log),
		wanted: map[string]int{}, faulty: map[peer.ID]int{}, running: map[string]*fetching{}, runs: map[*run]struct{}{},
	}
	inner := bsnet.NewFromIpfsHost(cfg.Host, bsnet.Prefix(cfg.Prefix), bsnet.SupportedProtocols([]protocol.ID{bsnet.ProtocolBitswap}))
	x.net = guardedNet{inner, x}
	x.bsw = bitswap.New(ctx, x.net, nil, s.bs,
		bitswap.WithPeerBlockRequestFilter(func(p peer.ID, _ cid.Cid) bool { return x.serves(p) }),
		bitswap.MaxOutstandingBytesPerPeer(l.PeerQueueBytes),
		bitswap.MaxQueuedWantlistEntriesPerPeer(l.PeerWants),
		bitswap.WithTargetMessageSize(l.MessageBytes),
		bitswap.MaxCidSize(128),
		bitswap.ProviderSearchDelay(time.Hour), // Fetch asks for blocks itself
	)
	return x
}

func orLog(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Close stops serving and fetching.
func (x *Exchange) Close() error { return x.bsw.Close() }

// Faults is how many false blocks were caught.
func (x *Exchange) Faults() int64 { return x.faults.Load() }

// Faulty reports whether p sent a false block.
func (x *Exchange) Faulty(p peer.ID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.faulty[p]
	return ok
}

func (x *Exchange) serves(p peer.ID) bool {
	return !x.Faulty(p) && (x.cfg.Serve == nil || x.cfg.Serve(p))
}

// Announce tells the swarm this node keeps the dataset c.
func (x *Exchange) Announce(ctx context.Context, c cid.Cid) error {
	if x.cfg.Holders == nil {
		return nil
	}
	return x.cfg.Holders.Provide(ctx, c, true)
}

// Progress is how far a fetch has come.
type Progress struct {
	Blocks int
	Bytes  int64 // fetched from peers, not counting blocks held already
	// Holders counts the peers that sent blocks.
	Holders int
}

// ErrStalled ends a fetch no holder sent a block for in ExchangeLimits.Stall.
var ErrStalled = errors.New("no holder sent a block")

// Fetch makes the dataset root kept here, cached: the blocks this node
// lacks come from the peers named (the renter of a lease) and the
// holders the swarm knows, several at once, each checked against its
// CID. A dataset of more than limit bytes is refused once it has sent
// that many. progress (nil: none) is called as blocks arrive, one call
// at a time. What is
// kept already returns at once; two fetches of one dataset share one.
func (x *Exchange) Fetch(ctx context.Context, root cid.Cid, limit int64, from []peer.ID, progress func(Progress)) (Dataset, error) {
	if limit > x.s.limit {
		return Dataset{}, fmt.Errorf("%s: %d bytes, datasets.cache_gib allows %d: %w", root, limit, x.s.limit, ErrTooBig)
	}
	key := root.KeyString()
	x.mu.Lock()
	if f := x.running[key]; f != nil {
		x.mu.Unlock()
		select {
		case <-f.done:
			return f.d, f.err
		case <-ctx.Done():
			return Dataset{}, ctx.Err()
		}
	}
	f := &fetching{done: make(chan struct{})}
	x.running[key] = f
	x.mu.Unlock()
	f.d, f.err = x.fetch(ctx, root, limit, from, progress)
	x.mu.Lock()
	delete(x.running, key)
	x.mu.Unlock()
	close(f.done)
	return f.d, f.err
}

func (x *Exchange) fetch(ctx context.Context, root cid.Cid, limit int64, from []peer.ID, progress func(Progress)) (Dataset, error) {
	if d, err := x.s.Get(ctx, root); err == nil {
		return d, nil
	}
	select {
	case x.slots <- struct{}{}:
		defer func() { <-x.slots }()
	case <-ctx.Done():
		return Dataset{}, ctx.Err()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := newRun(x, root, limit, progress)
	x.mu.Lock()
	x.runs[r] = struct{}{}
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.runs, r)
		x.mu.Unlock()
		// Late copies of blocks asked for (a slow holder's) are not
		// faults for a while yet.
		time.AfterFunc(x.cfg.Limits.Stall, func() { x.unwant(r.asked) })
	}()
	go x.watch(ctx, cancel, r.lastBlock)
	holders := make(chan peer.ID, x.cfg.Limits.Holders+len(from))
	x.connect(ctx, root, from, holders)
	err := r.loop(ctx, holders)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		x.drop(r.fresh)
		return Dataset{}, fmt.Errorf("fetch %s: %w", root, err)
	}
	d, err := x.s.keep(ctx, root)
	if err != nil {
		x.drop(r.fresh)
		return Dataset{}, err
	}
	if err := x.Announce(ctx, root); err != nil {
		x.log.Debug("announcing a dataset", "cid", root, "err", err)
	}
	return d, nil
}

// watch cancels a fetch that stalls.
func (x *Exchange) watch(ctx context.Context, cancel context.CancelCauseFunc, last func() time.Time) {
	t := time.NewTicker(min(x.cfg.Limits.Stall/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(last()) > x.cfg.Limits.Stall {
				cancel(fmt.Errorf("%w in %s", ErrStalled, x.cfg.Limits.Stall))
				return
			}
		}
	}
}

// connect reaches the named peers and the holders the swarm knows of
// (up to Limits.Holders, looked up meanwhile), each sent on holders once
// connected.
func (x *Exchange) connect(ctx context.Context, root cid.Cid, from []peer.ID, holders chan<- peer.ID) {
	h := x.cfg.Host
	seen := map[peer.ID]bool{h.ID(): true}
	reach := func(ai peer.AddrInfo) {
		if seen[ai.ID] || x.Faulty(ai.ID) {
			return
		}
		seen[ai.ID] = true
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := h.Connect(cctx, ai); err != nil {
			x.log.Debug("a dataset's holder is out of reach", "peer", ai.ID, "err", err)
			return
		}
		select {
		case holders <- ai.ID:
		default: // as many as the channel holds
		}
	}
	for _, p := range from {
		reach(peer.AddrInfo{ID: p})
	}
	if x.cfg.Holders == nil {
		return
	}
	go func() {
		for ai := range x.cfg.Holders.FindProvidersAsync(ctx, root, x.cfg.Limits.Holders) {
			reach(ai)
		}
	}()
}

func (x *Exchange) unwant(cs []cid.Cid) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range cs {
		k := string(c.Hash())
		if x.wanted[k]--; x.wanted[k] <= 0 {
			delete(x.wanted, k)
		}
	}
}

// drop removes the blocks a failed fetch brought that no dataset kept
// here links.
func (x *Exchange) drop(fresh []cid.Cid) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := x.s.dropUnlinked(ctx, fresh); err != nil {
		x.log.Warn("removing what a failed fetch brought", "err", err)
	}
}

// fault marks p as having sent a false block.
func (x *Exchange) fault(p peer.ID, why string) {
	x.mu.Lock()
	if _, ok := x.faulty[p]; ok {
		x.mu.Unlock()
		return
	}
	x.caught++
	x.faulty[p] = x.caught
	if len(x.faulty) > x.cfg.Limits.Faulty { // forget the one caught first
		oldest, at := peer.ID(""), x.caught+1
		for q, n := range x.faulty {
			if n < at {
				oldest, at = q, n
			}
		}
		delete(x.faulty, oldest)
	}
	x.mu.Unlock()
	x.faults.Add(1)
	x.log.Warn("a peer sent a block no fetch wanted: dropped", "peer", p, "why", why)
	if x.cfg.Fault != nil {
		x.cfg.Fault(p, why)
	}
}

// unwanted names a block of m that no fetch here wants nor this node
// keeps: its bytes hash to no CID asked for.
func (x *Exchange) unwanted(m bsmsg.BitSwapMessage) string {
	blks := m.Blocks()
	if len(blks) == 0 {
		return ""
	}
	x.mu.Lock()
	var check []cid.Cid
	for _, b := range blks {
		if x.wanted[string(b.Cid().Hash())] == 0 {
			check = append(check, b.Cid())
		}
	}
	x.mu.Unlock()
	for _, c := range check {
		if has, err := x.s.bs.Has(context.Background(), c); err != nil || !has {
			return fmt.Sprintf("block %s was never asked for", c)
		}
	}
	return ""
}

// guardedNet is bitswap's network with every message read first: a peer
// caught sending a false block is dropped from every session and never
// heard again.
type guardedNet struct {
	bsnetwork.BitSwapNetwork
	x *Exchange
}

func (g guardedNet) Start(rs ...bsnetwork.Receiver) {
	wrapped := make([]bsnetwork.Receiver, len(rs))
	for i, r := range rs {
		wrapped[i] = guardedReceiver{r, g.x}
	}
	g.BitSwapNetwork.Start(wrapped...)
}

type guardedReceiver struct {
	bsnetwork.Receiver
	x *Exchange
}

func (r guardedReceiver) ReceiveMessage(ctx context.Context, p peer.ID, m bsmsg.BitSwapMessage) {
	if r.x.Faulty(p) {
		return
	}
	if why := r.x.unwanted(m); why != "" {
		r.x.fault(p, why)
		r.Receiver.PeerDisconnected(p)
		return
	}
	r.x.dispatch(p, m)
	r.Receiver.ReceiveMessage(ctx, p, m)
}

func (r guardedReceiver) PeerConnected(p peer.ID) {
	if !r.x.Faulty(p) {
		r.Receiver.PeerConnected(p)
	}
}
