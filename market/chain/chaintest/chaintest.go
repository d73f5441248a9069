// Package chaintest makes parties, co-signed leases and chains of lease
// records for tests.
package chaintest

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Swarm is the swarm of the leases Lease makes.
const Swarm = "test-swarm"

// Party is a key and the head of its chain.
type Party struct {
	Key  crypto.PrivKey
	ID   peer.ID
	Head *chain.Block
}

// NewParty is a party with a fresh key and an empty chain.
func NewParty(t testing.TB) *Party {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	return &Party{Key: key, ID: id}
}

// Lease is a lease of an hour from start between renter and provider, in
// Swarm, co-signed by both.
func Lease(t testing.TB, id string, renter, provider *Party, start time.Time) (*pb.Lease, *pb.CoSigned) {
	t.Helper()
	l := &pb.Lease{Version: market.Version, Id: id, Renter: []byte(renter.ID), Provider: []byte(provider.ID),
		Bid: &pb.Bid{Header: &pb.Header{Swarm: Swarm}}, GpuCount: 1, StartUnixMs: start.UnixMilli(), DurationSeconds: 3600,
		Currency: "USD", PriceMicros: 2_000_000, CreatedUnixMs: start.UnixMilli()}
	cs, err := market.NewCoSigned(renter.Key, market.Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CoSign[*pb.Lease](provider.Key, market.Provider, cs); err != nil {
		t.Fatal(err)
	}
	return l, cs
}

// Receipt closes l, co-signed as cs, after it ran for ran, with outcome o.
func Receipt(l *pb.Lease, cs *pb.CoSigned, ran time.Duration, o pb.Outcome) *pb.Receipt {
	start := time.UnixMilli(l.StartUnixMs)
	return market.NewReceipt(l, cs, market.ReceiptTerms{Outcome: o, End: start.Add(ran), LastBeat: start.Add(ran)})
}

// Propose appends p's proposal of rc, closing the lease co-signed as cs,
// to its chain.
func (p *Party) Propose(t testing.TB, rc *pb.Receipt, cs *pb.CoSigned) *chain.Block {
	t.Helper()
	b, err := chain.Propose(p.Key, p.Head, rc, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Head = b
	return b
}

// Agree appends p's agreement to proposal to its chain.
func (p *Party) Agree(t testing.TB, proposal *chain.Block) *chain.Block {
	t.Helper()
	b, err := chain.Agree(p.Key, p.Head, proposal)
	if err != nil {
		t.Fatal(err)
	}
	p.Head = b
	return b
}

// Signed is the signed blocks of bs.
func Signed(bs ...*chain.Block) []*pb.SignedBlock {
	out := make([]*pb.SignedBlock, len(bs))
	for i, b := range bs {
		out[i] = b.Signed
	}
	return out
}

// Resign signs b, changed by change, again with key: what an owner that
// rewrites its own chain can do.
func Resign(t testing.TB, key crypto.PrivKey, b *chain.Block, change func(*pb.Block)) *chain.Block {
	t.Helper()
	m := proto.Clone(b.Block).(*pb.Block)
	change(m)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := key.Sign(market.SignedBytes(chain.Domain, body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := chain.Open(&pb.SignedBlock{Body: body, Signature: sig})
	if err != nil {
		t.Fatalf("the rewritten block does not open: %v", err)
	}
	return out
}
