// Package trustchain keeps this node's chain of lease records
// (market/chain): the block it proposes when a lease it is party to ends,
// the agreement it makes to a counterparty's proposal, and beside each the
// counterparty's block that completes it or that it completes. It serves
// the chain to whoever asks, whole from any seq.
//
// A block signed is a promise: a second block at its seq, or a second
// record of its lease, is proof against this node (a fork). So a block is
// stored before it is handed to anyone, appends are made one at a time,
// each on the stored head, and a lease gets one record however often its
// end is handled (a restart between the record and the lease's own end
// finds the record and reuses it).
//
// It imports market/... only (besides libp2p's core and go-datastore);
// the lease owner and the renter reach it through their own interfaces,
// the node serves it on p2p's chain protocol.
package trustchain

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	ds "github.com/ipfs/go-datastore"
	"github.com/ipfs/go-datastore/query"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Keys of the chain in the node's datastore.
var (
	headKey     = ds.NewKey("/chain/head")
	blockPrefix = ds.NewKey("/chain/block")
	linkPrefix  = ds.NewKey("/chain/link")
	leasePrefix = ds.NewKey("/chain/lease")
	// withPrefix indexes the blocks by counterparty: /chain/with/<peer>/<seq>.
	withPrefix = ds.NewKey("/chain/with")
)

func seqKey(prefix ds.Key, seq uint64) ds.Key {
	return prefix.ChildString(fmt.Sprintf("%020d", seq))
}

// leaseKey indexes a record by its lease's hash: lease IDs are chosen by
// renters, and two renters may choose one.
func leaseKey(leaseHash []byte) ds.Key { return leasePrefix.ChildString(hex.EncodeToString(leaseHash)) }

func withKey(p peer.ID) ds.Key { return withPrefix.ChildString(p.String()) }

// ErrClosed is a lease this node already closed with a record of its own
// other than the one it is asked to agree to: it keeps one record per
// lease, and the two parties' records then disagree, visibly.
var ErrClosed = errors.New("lease already closed in this node's chain")

// Keeper is this node's chain.
type Keeper struct {
	self  peer.ID
	key   crypto.PrivKey
	store ds.Batching
	// turn is held by the one append under way, across the write of its
	// block: the next is made on the head stored, never on one that a
	// crash could lose after it was sent. ctx bounds the wait for it.
	turn chan struct{}
	head *chain.Block // guarded by turn
}

// Open is the chain of key's peer kept in store, at its stored head.
func Open(ctx context.Context, key crypto.PrivKey, store ds.Batching) (*Keeper, error) {
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	k := &Keeper{self: self, key: key, store: store, turn: make(chan struct{}, 1)}
	raw, err := store.Get(ctx, headKey)
	switch {
	case errors.Is(err, ds.ErrNotFound):
		return k, nil
	case err != nil:
		return nil, fmt.Errorf("chain head: %w", err)
	}
	seq, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("chain head %q: %w", raw, err)
	}
	if k.head, err = k.block(ctx, seq); err != nil {
		return nil, fmt.Errorf("chain head %d: %w", seq, err)
	}
	return k, nil
}

// block is this node's block seq, opened.
func (k *Keeper) block(ctx context.Context, seq uint64) (*chain.Block, error) {
	return k.stored(ctx, seqKey(blockPrefix, seq))
}

func (k *Keeper) stored(ctx context.Context, key ds.Key) (*chain.Block, error) {
	raw, err := k.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	sb := new(pb.SignedBlock)
	if err := proto.Unmarshal(raw, sb); err != nil {
		return nil, err
	}
	return chain.Open(sb)
}

// Head is the last block of this node's chain; nil while it is empty.
func (k *Keeper) Head(ctx context.Context) (*chain.Block, error) {
	if err := k.take(ctx); err != nil {
		return nil, err
	}
	defer k.give()
	return k.head, nil
}

func (k *Keeper) take(ctx context.Context) error {
	select {
	case k.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *Keeper) give() { <-k.turn }

// Of is this node's record of the lease whose co-signed body hashes to
// leaseHash; ds.ErrNotFound for none.
func (k *Keeper) Of(ctx context.Context, leaseHash []byte) (*chain.Block, error) {
	raw, err := k.store.Get(ctx, leaseKey(leaseHash))
	if err != nil {
		return nil, err
	}
	seq, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("chain index %q: %w", raw, err)
	}
	return k.block(ctx, seq)
}

// Propose records rc, this node's receipt of the lease co-signed as
// lease (with the extension that set its term; nil: none), as a proposal
// in this node's chain, for the counterparty to complete. A lease this
// node has a record of already gets that record back, whatever rc says:
// one lease, one record.
func (k *Keeper) Propose(ctx context.Context, rc *pb.Receipt, lease, ext *pb.CoSigned) (*chain.Block, error) {
	return k.append(ctx, rc.LeaseHash, func() (*chain.Block, error) {
		return chain.Propose(k.key, k.head, rc, lease, ext)
	}, nil)
}

// Agree completes proposal, a counterparty's proposal to this node of the
// receipt whose body is receipt (the one this node countersigned), with
// an agreement in this node's chain, stored with the proposal beside it.
// A lease this node closed already with another record is ErrClosed.
func (k *Keeper) Agree(ctx context.Context, proposal *pb.SignedBlock, receipt []byte) (*chain.Block, error) {
	p, err := chain.Open(proposal)
	if err != nil {
		return nil, err
	}
	switch {
	case !p.Proposal() || p.Counterparty() != k.self:
		return nil, fmt.Errorf("%w: %s's block %d is no proposal to this node", chain.ErrBlock, p.Owner(), p.Seq)
	case string(p.Block.Receipt) != string(receipt):
		return nil, fmt.Errorf("%w: %s's proposal %d is of another receipt than the one countersigned", chain.ErrBlock, p.Owner(), p.Seq)
	}
	b, err := k.append(ctx, p.Receipt().LeaseHash, func() (*chain.Block, error) {
		return chain.Agree(k.key, k.head, p)
	}, p)
	if err == nil && !chain.Completes(b, p) {
		return nil, fmt.Errorf("%w: lease %s: this node's record %d", ErrClosed, p.Receipt().LeaseId, b.Seq)
	}
	return b, err
}

// Completed keeps agreement, the counterparty's completion of this node's
// proposal, beside it.
func (k *Keeper) Completed(ctx context.Context, proposal *chain.Block, agreement *pb.SignedBlock) error {
	a, err := chain.Open(agreement)
	if err != nil {
		return err
	}
	if !chain.Completes(a, proposal) {
		return fmt.Errorf("%w: %s's block %d does not complete this node's proposal %d", chain.ErrBlock, a.Owner(), a.Seq, proposal.Seq)
	}
	return k.store.Put(ctx, seqKey(linkPrefix, proposal.Seq), marshal(a.Signed))
}

// append adds the block build makes on the head, with link beside it (nil:
// none), unless the lease hashing to leaseHash has a record already: then
// that record is returned.
func (k *Keeper) append(ctx context.Context, leaseHash []byte, build func() (*chain.Block, error), link *chain.Block) (*chain.Block, error) {
	if err := k.take(ctx); err != nil {
		return nil, err
	}
	defer k.give()
	switch had, err := k.Of(ctx, leaseHash); {
	case err == nil:
		return had, nil
	case !errors.Is(err, ds.ErrNotFound):
		return nil, err
	}
	b, err := build()
	if err != nil {
		return nil, err
	}
	batch, err := k.store.Batch(ctx)
	if err != nil {
		return nil, err
	}
	seq := []byte(strconv.FormatUint(b.Seq, 10))
	puts := map[ds.Key][]byte{seqKey(blockPrefix, b.Seq): marshal(b.Signed), leaseKey(leaseHash): seq, headKey: seq,
		seqKey(withKey(b.Counterparty()), b.Seq): {}}
	if link != nil {
		puts[seqKey(linkPrefix, b.Seq)] = marshal(link.Signed)
	}
	for k, v := range puts {
		if err := batch.Put(ctx, k, v); err != nil {
			return nil, err
		}
	}
	if err := batch.Commit(ctx); err != nil {
		return nil, fmt.Errorf("chain block %d: %w", b.Seq, err)
	}
	if err := k.store.Sync(ctx, blockPrefix); err != nil {
		return nil, fmt.Errorf("chain block %d: %w", b.Seq, err)
	}
	k.head = b
	return b, nil
}

func marshal(sb *pb.SignedBlock) []byte {
	raw, _ := proto.Marshal(sb)
	return raw
}

// Range is this node's chain from seq from on (0: its newest blocks),
// only the blocks of leases with about when it is set, at most limit
// blocks, in order, each as a marshalled ChainEntry with the
// counterparty's block beside it when this node holds one.
func (k *Keeper) Range(ctx context.Context, from uint64, limit int, about peer.ID) ([][]byte, error) {
	if limit <= 0 {
		return nil, nil
	}
	seqs, err := k.seqs(ctx, from, limit, about)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(seqs))
	for _, seq := range seqs {
		e, err := k.entry(ctx, seq)
		if errors.Is(err, ds.ErrNotFound) {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// seqs are the seqs of the blocks Range is asked for, in order.
func (k *Keeper) seqs(ctx context.Context, from uint64, limit int, about peer.ID) ([]uint64, error) {
	if about == "" {
		if from == 0 {
			head, err := k.headSeq(ctx)
			if err != nil {
				return nil, err
			}
			from = max(head, uint64(limit)) - uint64(limit) + 1
		}
		seqs := make([]uint64, limit)
		for i := range seqs {
			seqs[i] = from + uint64(i)
		}
		return seqs, nil
	}
	order := query.Order(query.OrderByKey{})
	if from == 0 {
		order = query.OrderByKeyDescending{}
	}
	res, err := k.store.Query(ctx, query.Query{Prefix: withKey(about).String(), KeysOnly: true, Orders: []query.Order{order}})
	if err != nil {
		return nil, err
	}
	defer res.Close()
	var seqs []uint64
	for e := range res.Next() {
		if e.Error != nil {
			return nil, e.Error
		}
		seq, err := strconv.ParseUint(ds.RawKey(e.Key).Name(), 10, 64)
		if err != nil || seq < from {
			continue
		}
		if seqs = append(seqs, seq); len(seqs) == limit {
			break
		}
	}
	if from == 0 {
		slices.Reverse(seqs)
	}
	return seqs, nil
}

// headSeq is the stored head's seq; 0 for an empty chain.
func (k *Keeper) headSeq(ctx context.Context) (uint64, error) {
	raw, err := k.store.Get(ctx, headKey)
	if errors.Is(err, ds.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(raw), 10, 64)
}

// entry is block seq as a marshalled ChainEntry, with the counterparty's
// block beside it when this node holds one.
func (k *Keeper) entry(ctx context.Context, seq uint64) ([]byte, error) {
	b, err := k.store.Get(ctx, seqKey(blockPrefix, seq))
	if err != nil {
		return nil, err
	}
	e := &pb.ChainEntry{Block: new(pb.SignedBlock)}
	if err := proto.Unmarshal(b, e.Block); err != nil {
		return nil, err
	}
	if l, err := k.store.Get(ctx, seqKey(linkPrefix, seq)); err == nil {
		e.Link = new(pb.SignedBlock)
		if proto.Unmarshal(l, e.Link) != nil {
			e.Link = nil
		}
	}
	return proto.Marshal(e)
}
