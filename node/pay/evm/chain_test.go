package evm

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/pay"
)

// chains are the renter's and the provider's Chain on one test chain.
func (c *testChain) chains(t testing.TB) (renter, provider *Chain) {
	t.Helper()
	ctx := context.Background()
	var err error
	if renter, err = New(ctx, c.sim.Client(), c.channelsAddr, c.tokenAddr, c.renter); err != nil {
		t.Fatal(err)
	}
	if provider, err = New(ctx, c.sim.Client(), c.channelsAddr, c.tokenAddr, c.provider); err != nil {
		t.Fatal(err)
	}
	renter.Mine, provider.Mine = func() { c.sim.Commit() }, func() { c.sim.Commit() }
	return renter, provider
}

// rentMany runs n one-minute leases of one GPU at 3.6 per hour (1,000
// micros a second) between the pair on one channel, each paid by a
// voucher per 5-second beat through the renter's Payer and the
// provider's Tab, each lease's base and nonce the last one's final
// voucher, as the two nodes do; the provider redeems only when it
// closes. It returns the transactions sent and what the provider got.
func rentMany(t testing.TB, c *testChain, n int) (txs int, paid int64) {
	t.Helper()
	ctx := context.Background()
	renter, provider := c.chains(t)
	// The renter's wallet of a fresh test chain has approved nothing.
	c.must(c.send(c.renter, "approve", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.token.Approve(o, c.channelsAddr, big.NewInt(0))
	}))
	before := c.balance(c.providerAddr)
	id, err := renter.Open(ctx, c.providerAddr, big.NewInt(int64(n)*60_000))
	if err != nil {
		t.Fatal(err)
	}
	txs += 2 // approve and open
	ch, err := renter.Channel(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	base, nonce := new(big.Int), uint64(0)
	var last *pb.Voucher
	for i := range n {
		l := &pb.Lease{Id: "lease-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), StartUnixMs: 1_700_000_000_000, DurationSeconds: 60, PriceMicros: 3_600_000, GpuCount: 1,
			Payment: &pb.LeasePayment{Settlement: &pb.Settlement{Kind: pb.SettlementKind_SETTLEMENT_EVM, ChainId: c.chainID.Uint64(), Contract: c.channelsAddr.Bytes(), Token: c.tokenAddr.Bytes(), UnitsPerMicro: 1, Payee: c.providerAddr.Bytes()},
				Channel: id.Bytes(), Payer: c.renterAddr.Bytes(), Base: base.Bytes(), Nonce: nonce}}
		terms, err := pay.TermsOf(l)
		if err != nil {
			t.Fatal(err)
		}
		p, tab := pay.Payer{Terms: terms, Key: c.renter}, &pay.Tab{Terms: terms, Deposit: ch.Deposit}
		for beat := uint64(1); beat <= 12; beat++ {
			metered := time.Duration(beat) * 5 * time.Second
			v, err := p.Voucher(beat, metered)
			if err != nil {
				t.Fatal(err)
			}
			if err := tab.Take(v, metered); err != nil {
				t.Fatalf("lease %d beat %d: %v", i, beat, err)
			}
		}
		last = tab.Last
		base, nonce = tab.Amount(), last.Nonce
	}
	v := pay.Voucher{Channel: id, Amount: new(big.Int).SetBytes(last.Amount), Nonce: last.Nonce}
	if err := provider.Close(ctx, v, last.Signature); err != nil {
		t.Fatal(err)
	}
	txs++
	return txs, c.balance(c.providerAddr) - before
}

func TestAPairRentingAHundredTimesPaysOnChainThreeTimes(t *testing.T) {
	c := newTestChain(t)
	txs, paid := rentMany(t, c, 100)
	if paid != 100*60_000 {
		t.Fatalf("the provider got %d for 100 leases of 60,000", paid)
	}
	if per := float64(txs) / 100; per > 0.05 {
		t.Fatalf("%d transactions for 100 leases: %.2f a lease", txs, per)
	}
}

func TestChainReadsAndRefusals(t *testing.T) {
	c := newTestChain(t)
	ctx := context.Background()
	renter, provider := c.chains(t)
	if _, ok, err := renter.LiveChannel(ctx, c.renterAddr, c.providerAddr); err != nil || ok {
		t.Fatalf("a live channel before any was opened: %v %v", ok, err)
	}
	id, err := renter.Open(ctx, c.providerAddr, big.NewInt(1000))
	if err != nil {
		t.Fatal(err)
	}
	if live, ok, err := provider.LiveChannel(ctx, c.renterAddr, c.providerAddr); err != nil || !ok || live != id {
		t.Fatalf("live channel %s %v %v, want %s", live, ok, err, id)
	}
	if _, err := renter.Open(ctx, c.providerAddr, big.NewInt(1)); !errors.Is(err, ErrRefused) {
		t.Fatalf("a second live channel: %v", err)
	}
	if err := renter.TopUp(ctx, id, big.NewInt(500)); err != nil {
		t.Fatal(err)
	}
	ch, err := provider.Channel(ctx, id)
	if err != nil || ch.Deposit.Int64() != 1500 || ch.Renter != c.renterAddr || ch.Provider != c.providerAddr {
		t.Fatalf("channel %+v %v", ch, err)
	}
	if _, err := provider.Channel(ctx, common.HexToHash("0x01")); err == nil {
		t.Fatal("an unknown channel read as one")
	}
	bal, err := renter.BalancesOf(ctx, c.renterAddr)
	if err != nil || bal.Token.Int64() != minted-1500 || bal.Coin.Sign() <= 0 {
		t.Fatalf("balances %+v %v", bal, err)
	}
	if _, err := New(ctx, c.sim.Client(), common.HexToAddress("0x0123"), c.tokenAddr, c.renter); err == nil || !bytes.Contains([]byte(err.Error()), []byte("no contract at that address")) {
		t.Fatalf("a contract address with no code: %v", err)
	}
	if err := renter.StartClose(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := renter.Withdraw(ctx, id); !errors.Is(err, ErrRefused) {
		t.Fatalf("withdraw in the challenge period: %v", err)
	}
	c.later(testChallenge * time.Second)
	if err := renter.Withdraw(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.conserved(minted, 0, 0)
}

// BenchmarkChannelGas reports the gas of each channel transaction on the
// simulated chain, and the transactions a lease costs for a pair that
// rents 100 times on one channel.
func BenchmarkChannelGas(b *testing.B) {
	for range b.N {
		c := newTestChain(b)
		ctx := context.Background()
		renter, provider := c.chains(b)
		id, err := renter.Open(ctx, c.providerAddr, big.NewInt(1000))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(renter.LastGas.Load()), "open-gas")
		if err := renter.TopUp(ctx, id, big.NewInt(1000)); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(renter.LastGas.Load()), "topup-gas")
		if err := renter.StartClose(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(renter.LastGas.Load()), "startclose-gas")
		v, sig := c.voucher(id, 700, 1)
		if err := provider.Redeem(ctx, v, sig); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(provider.LastGas.Load()), "challenge-gas")
		v, sig = c.voucher(id, 900, 2)
		if err := provider.Close(ctx, v, sig); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(provider.LastGas.Load()), "close-gas")
		c2 := newTestChain(b)
		txs, _ := rentMany(b, c2, 100)
		b.ReportMetric(float64(txs)/100, "txs/lease")
	}
}
