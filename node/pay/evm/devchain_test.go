package evm

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/node/pay"
)

func TestADevChainServesJSONRPCAndMinesByItself(t *testing.T) {
	rk, _ := crypto.GenerateKey()
	pk, _ := crypto.GenerateKey()
	ra, pa := crypto.PubkeyToAddress(rk.PublicKey), crypto.PubkeyToAddress(pk.PublicKey)
	d, err := StartDevChain(ra, pa)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Mint(ctx, ra, big.NewInt(50_000_000)); err != nil {
		t.Fatal(err)
	}
	renter, err := Dial(ctx, d.RPCURL, d.ChainID, d.Contract, d.Token, rk)
	if err != nil {
		t.Fatal(err)
	}
	provider, err := Dial(ctx, d.RPCURL, d.ChainID, d.Contract, d.Token, pk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, d.RPCURL, 1, d.Contract, d.Token, rk); err == nil {
		t.Fatal("a chain ID the endpoint does not serve was taken")
	}
	id, err := renter.Open(ctx, pa, big.NewInt(10_000_000))
	if err != nil {
		t.Fatal(err)
	}
	v := pay.Voucher{Channel: id, Amount: big.NewInt(1_234_567), Nonce: 1}
	sig, err := pay.Sign(rk, renter.Domain, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := provider.Close(ctx, v, sig); err != nil {
		t.Fatal(err)
	}
	for who, want := range map[*Chain]int64{renter: 50_000_000 - 1_234_567, provider: 1_234_567} {
		b, err := who.BalancesOf(ctx, who.Address())
		if err != nil || b.Token.Int64() != want {
			t.Fatalf("%s holds %v (%v), want %d", who.Address(), b.Token, err, want)
		}
	}
}

func TestADevChainFundsAccountsMadeAfterItStarted(t *testing.T) {
	d, err := StartDevChain()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k1, _ := crypto.GenerateKey()
	k2, _ := crypto.GenerateKey()
	a1, a2 := crypto.PubkeyToAddress(k1.PublicKey), crypto.PubkeyToAddress(k2.PublicKey)
	if err := d.Fund(ctx, big.NewInt(7_000_000), a1, a2); err != nil {
		t.Fatal(err)
	}
	c1, err := Dial(ctx, d.RPCURL, d.ChainID, d.Contract, d.Token, k1)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []common.Address{a1, a2} {
		b, err := c1.BalancesOf(ctx, a)
		if err != nil || b.Token.Int64() != 7_000_000 || b.Coin.Cmp(ether(10)) != 0 {
			t.Fatalf("%s holds %+v (%v), want 10 coins and 7,000,000 of the token", a, b, err)
		}
	}
	// The coin pays for the gas of an opening.
	if _, err := c1.Open(ctx, a2, big.NewInt(1_000_000)); err != nil {
		t.Fatal(err)
	}
}
