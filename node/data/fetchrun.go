package data

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	bsmsg "github.com/ipfs/boxo/bitswap/message"
	bspb "github.com/ipfs/boxo/bitswap/message/pb"
	bsnetwork "github.com/ipfs/boxo/bitswap/network"
	"github.com/ipfs/boxo/ipld/merkledag"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A fetch asks its holders for blocks itself, over bitswap's wire
// protocol: each block from one holder, the holder with the fewest blocks
// outstanding that has not said it lacks it, so that every holder's link
// is kept busy (bitswap's own sessions favour the peer that answered
// most, which leaves the others idle). A holder that lacks a block is
// not asked for it again; one that does not answer in askTimeout has it
// asked of another.
const (
	// perHolder bounds the blocks asked of one holder at once: enough
	// to fill a long, fast link with 1 MiB blocks.
	perHolder = 16
	// askTimeout is how long a block asked of one holder waits before
	// another is asked too.
	askTimeout = 30 * time.Second
)

// run is one fetch under way.
type run struct {
	x        *Exchange
	root     cid.Cid
	limit    int64
	progress func(Progress)
	in       chan arrival

	mu     sync.Mutex // what the receiver and the loop share
	asked  []cid.Cid  // every CID asked for, for the fault check
	fresh  []cid.Cid  // blocks this fetch brought, gone if it fails
	last   time.Time
	wanted map[cid.Cid]bool // asked and not yet here

	got     Progress
	holders []peer.ID
	senders map[peer.ID]bsnetwork.MessageSender
	out     map[peer.ID]int              // blocks outstanding by holder
	lacks   map[cid.Cid]map[peer.ID]bool // said so: never asked again
	tried   map[cid.Cid]map[peer.ID]bool // sent nothing in time: others first
	sent    map[cid.Cid]sentTo
	heard   map[peer.ID]time.Time // when each holder last sent a block
	queue   []cid.Cid             // to ask for, in the order found
	seen    map[cid.Cid]bool
	left    int // blocks found and not yet here
}

type sentTo struct {
	p  peer.ID
	at time.Time
}

// arrival is what a holder sent: a block or that it lacks one.
type arrival struct {
	from  peer.ID
	block blocks.Block
	lacks cid.Cid
}

func newRun(x *Exchange, root cid.Cid, limit int64, progress func(Progress)) *run {
	return &run{
		x: x, root: root, limit: limit, progress: progress, in: make(chan arrival, 1024),
		last: time.Now(), wanted: map[cid.Cid]bool{},
		senders: map[peer.ID]bsnetwork.MessageSender{}, out: map[peer.ID]int{},
		lacks: map[cid.Cid]map[peer.ID]bool{}, sent: map[cid.Cid]sentTo{}, seen: map[cid.Cid]bool{},
		heard: map[peer.ID]time.Time{}, tried: map[cid.Cid]map[peer.ID]bool{},
	}
}

func (r *run) lastBlock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// dispatch hands each fetch under way what p sent of the blocks it asked
// for.
func (x *Exchange) dispatch(p peer.ID, m bsmsg.BitSwapMessage) {
	if len(m.Blocks())+len(m.DontHaves()) == 0 {
		return
	}
	x.mu.Lock()
	runs := make([]*run, 0, len(x.runs))
	for r := range x.runs {
		runs = append(runs, r)
	}
	x.mu.Unlock()
	for _, r := range runs {
		r.offer(p, m)
	}
}

// offer takes what the run asked for; it never blocks the network.
func (r *run) offer(p peer.ID, m bsmsg.BitSwapMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range m.Blocks() {
		if r.wanted[b.Cid()] {
			delete(r.wanted, b.Cid())
			r.send(arrival{from: p, block: b})
		}
	}
	for _, c := range m.DontHaves() {
		if r.wanted[c] {
			r.send(arrival{from: p, lacks: c})
		}
	}
}

// send queues a for the loop; with its queue full, a block waits to be
// asked again (askTimeout).
func (r *run) send(a arrival) {
	select {
	case r.in <- a:
	default:
		if a.block != nil {
			r.wanted[a.block.Cid()] = true
		}
	}
}

// loop fetches the DAG at root: it asks holders as they come for the
// blocks found, and takes each block as it arrives, until all are here.
func (r *run) loop(ctx context.Context, holders <-chan peer.ID) error {
	defer func() {
		for _, s := range r.senders {
			s.Reset()
		}
	}()
	if err := r.found(ctx, r.root); err != nil {
		return err
	}
	tick := time.NewTicker(askTimeout / 4)
	defer tick.Stop()
	for r.left > 0 {
		if err := r.ask(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-holders:
			r.holders = append(r.holders, p)
		case a := <-r.in:
			if err := r.arrived(ctx, a); err != nil {
				return err
			}
		case <-tick.C:
			r.retry()
		}
	}
	return nil
}

// found takes a CID of the DAG: one kept here already is read, and its
// links found in turn; another is queued to be asked for.
func (r *run) found(ctx context.Context, c cid.Cid) error {
	if r.seen[c] {
		return nil
	}
	r.seen[c] = true
	if b, err := r.x.s.bs.Get(ctx, c); err == nil {
		return r.links(ctx, b)
	}
	r.queue = append(r.queue, c)
	r.left++
	return nil
}

// links finds the links of block b.
func (r *run) links(ctx context.Context, b blocks.Block) error {
	c := b.Cid()
	if c.Type() == cid.Raw {
		return nil
	}
	nd, err := merkledag.DecodeProtobufBlock(b)
	if err != nil {
		return fmt.Errorf("block %s: %w", c, err)
	}
	for _, l := range nd.Links() {
		if err := r.found(ctx, l.Cid); err != nil {
			return err
		}
	}
	return nil
}

// arrived takes a block, or a holder's word that it lacks one.
func (r *run) arrived(ctx context.Context, a arrival) error {
	if a.block == nil {
		c := a.lacks
		if s, ok := r.sent[c]; ok && s.p == a.from {
			delete(r.sent, c)
			r.out[a.from]--
		}
		if r.lacks[c] == nil {
			r.lacks[c] = map[peer.ID]bool{}
		}
		r.lacks[c][a.from] = true // asked of another, or of a holder yet to come
		r.queue = append([]cid.Cid{c}, r.queue...)
		return nil
	}
	b, c := a.block, a.block.Cid()
	if _, ok := r.heard[a.from]; !ok {
		r.got.Holders++ // the loop alone writes got
	}
	r.heard[a.from] = time.Now()
	if s, ok := r.sent[c]; ok {
		delete(r.sent, c)
		r.out[s.p]--
	}
	if err := r.x.s.bs.Put(ctx, b); err != nil {
		return err
	}
	r.left--
	r.mu.Lock()
	r.last = time.Now()
	r.fresh = append(r.fresh, c)
	r.got.Blocks++
	r.got.Bytes += int64(len(b.RawData()))
	p := r.got
	r.mu.Unlock()
	if p.Bytes > r.limit {
		return fmt.Errorf("%s: more than the %d bytes the lease names: %w", r.root, r.limit, ErrTooBig)
	}
	if r.progress != nil {
		r.progress(p)
	}
	return r.links(ctx, b)
}

// ask sends the queued CIDs to the holders with room, each to the one
// with the fewest outstanding that has not said it lacks it.
func (r *run) ask(ctx context.Context) error {
	if len(r.queue) == 0 || len(r.holders) == 0 {
		return nil
	}
	batch := map[peer.ID][]cid.Cid{}
	rest := r.queue[:0]
	for _, c := range r.queue {
		best, any := r.holderFor(c)
		if !any && len(r.tried[c]) > 0 { // every holder tried: again
			delete(r.tried, c)
			best, _ = r.holderFor(c)
		}
		if best == "" {
			rest = append(rest, c)
			continue
		}
		r.out[best]++
		r.sent[c] = sentTo{best, time.Now()}
		batch[best] = append(batch[best], c)
	}
	r.queue = rest
	for p, cs := range batch {
		r.mu.Lock()
		for _, c := range cs {
			r.wanted[c] = true
		}
		r.asked = append(r.asked, cs...)
		r.mu.Unlock()
		r.x.want(cs)
		if err := r.sendWants(ctx, p, cs); err != nil {
			r.x.log.Debug("a dataset's holder could not be asked", "peer", p, "err", err)
			r.drop(p)
		}
	}
	return nil
}

// holderFor is the holder to ask for c: of those with room that have
// neither said they lack it nor been tried for it, the one with the
// fewest blocks outstanding; empty when there is none. any says whether
// one would do but for room.
func (r *run) holderFor(c cid.Cid) (best peer.ID, any bool) {
	n := perHolder
	for _, p := range r.holders {
		if r.lacks[c][p] || r.tried[c][p] || r.x.Faulty(p) {
			continue
		}
		any = true
		if r.out[p] < n {
			best, n = p, r.out[p]
		}
	}
	return best, any
}

// sendWants asks p for cs on the fetch's stream to it.
func (r *run) sendWants(ctx context.Context, p peer.ID, cs []cid.Cid) error {
	s := r.senders[p]
	if s == nil {
		var err error
		s, err = r.x.net.NewMessageSender(ctx, p, &bsnetwork.MessageSenderOpts{MaxRetries: 2, SendTimeout: askTimeout, SendErrorBackoff: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		r.senders[p] = s
	}
	m := bsmsg.New(false)
	for _, c := range cs {
		m.AddEntry(c, 1, bspb.Message_Wantlist_Block, true)
	}
	return s.SendMsg(ctx, m)
}

// drop stops asking p: what it was asked goes back to the queue.
func (r *run) drop(p peer.ID) {
	for i, q := range r.holders {
		if q == p {
			r.holders = append(r.holders[:i], r.holders[i+1:]...)
			break
		}
	}
	for c, s := range r.sent {
		if s.p == p {
			delete(r.sent, c)
			r.queue = append(r.queue, c)
		}
	}
	delete(r.out, p)
	if s := r.senders[p]; s != nil {
		s.Reset()
		delete(r.senders, p)
	}
}

// retry asks again, of another holder where there is one, for the blocks
// whose holder has sent nothing for askTimeout since it was asked (a slow
// holder that sends is waited for), and drops holders caught faulty.
func (r *run) retry() {
	for _, p := range slices.Clone(r.holders) {
		if r.x.Faulty(p) {
			r.drop(p)
		}
	}
	now := time.Now()
	for c, s := range r.sent {
		if now.Sub(s.at) < askTimeout || now.Sub(r.heard[s.p]) < askTimeout {
			continue
		}
		delete(r.sent, c)
		r.out[s.p]--
		if r.tried[c] == nil {
			r.tried[c] = map[peer.ID]bool{}
		}
		r.tried[c][s.p] = true
		r.queue = append(r.queue, c)
	}
}

// want counts cs as asked for by a fetch, for the fault check.
func (x *Exchange) want(cs []cid.Cid) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, c := range cs {
		x.wanted[string(c.Hash())]++
	}
}
