package evm

import (
	"context"
	"crypto/ecdsa"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"google.golang.org/protobuf/proto"
)

// heldVoucher is a provider's lease record holding the voucher key signs
// on channel id for amount at nonce.
func heldVoucher(t *testing.T, c *Chain, key *ecdsa.PrivateKey, id common.Hash, amount int64, nonce uint64) *records.Lease {
	t.Helper()
	v := pay.Voucher{Channel: id, Amount: big.NewInt(amount), Nonce: nonce}
	sig, err := pay.Sign(key, c.Domain, v)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := proto.Marshal(&pb.Voucher{Channel: id.Bytes(), Amount: v.Amount.Bytes(), Nonce: nonce, Signature: sig, LeaseId: "lease-" + id.Hex()[2:10]})
	return &records.Lease{ID: "lease-" + id.Hex()[2:10], Role: records.Provider, Voucher: raw}
}

func TestAProviderRedeemsWhenARenterClosesOrTheDepositRunsLow(t *testing.T) {
	d, err := StartDevChain()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var keys []*ecdsa.PrivateKey
	var addrs []common.Address
	for range 4 {
		k, _ := crypto.GenerateKey()
		keys, addrs = append(keys, k), append(addrs, crypto.PubkeyToAddress(k.PublicKey))
	}
	if err := d.Fund(ctx, big.NewInt(10_000_000), addrs...); err != nil {
		t.Fatal(err)
	}
	var chains []*Chain
	for _, k := range keys {
		c, err := Dial(ctx, d.RPCURL, d.ChainID, d.Contract, d.Token, k)
		if err != nil {
			t.Fatal(err)
		}
		chains = append(chains, c)
	}
	prov, closer, spender, slow := chains[0], chains[1], chains[2], chains[3]
	clk := clock.NewFake()
	w := &pay.Wallet{Key: keys[0], Chain: prov, RedeemAt: 80, RedeemEvery: 24 * time.Hour, Clock: clk, Log: slog.New(slog.DiscardHandler)}
	// Two renters' channels to the provider, each with 1,000,000.
	a, err := closer.Open(ctx, addrs[0], big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	b, err := spender.Open(ctx, addrs[0], big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	c, err := slow.Open(ctx, addrs[0], big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	paid := func(id common.Hash) int64 {
		ch, err := prov.Channel(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return ch.Paid.Int64()
	}
	// Half the deposit, an older voucher beside it: nothing is due before
	// the schedule.
	recs := []*records.Lease{heldVoucher(t, prov, keys[1], a, 300_000, 2), heldVoucher(t, prov, keys[1], a, 500_000, 3), heldVoucher(t, prov, keys[2], b, 500_000, 1)}
	if n := w.RedeemDue(ctx, recs, false); n != 0 {
		t.Fatalf("redeemed %d channels with nothing due", n)
	}
	// The renter of a starts to close it: its latest voucher is redeemed
	// at once, within the challenge period.
	if err := closer.StartClose(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n := w.RedeemDue(ctx, recs, false); n != 1 || paid(a) != 500_000 || paid(b) != 0 {
		t.Fatalf("redeemed %d; channel a paid %d (want 500000), b %d (want 0)", n, paid(a), paid(b))
	}
	// b's voucher reaches 80% of its deposit: the redeemer, nudged, redeems
	// it without waiting for the schedule.
	recs = append(recs, heldVoucher(t, prov, keys[2], b, 850_000, 2), heldVoucher(t, prov, keys[3], c, 100_000, 1))
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Redeem(run, func(context.Context) ([]*records.Lease, error) { return recs, nil })
	}()
	w.Nudge()
	deadline := time.Now().Add(time.Minute)
	for paid(b) != 850_000 {
		if time.Now().After(deadline) {
			t.Fatalf("channel b paid %d a minute after the nudge, want 850000", paid(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if paid(c) != 0 {
		t.Fatalf("channel c paid %d on a nudge: its voucher is a tenth of the deposit, due only on the schedule", paid(c))
	}
	// A day later, on its schedule, every channel's latest voucher is.
	for deadline := time.Now().Add(time.Minute); paid(c) != 100_000; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("channel c paid %d after the schedule's day, want 100000", paid(c))
		}
		clk.Advance(time.Hour)
	}
	stop()
	<-done
	b1, _ := prov.BalancesOf(ctx, addrs[0])
	if b1.Token.Int64() != 10_000_000+500_000+850_000+100_000 {
		t.Errorf("the provider holds %s of the token, want its own 10,000,000 and 1,450,000 redeemed", b1.Token)
	}
}
