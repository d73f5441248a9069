package evm

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/crypto/secp256k1"
	"github.com/idlegrid/idlegrid/node/pay"
)

const minted = 1_000_000_000

// conserved fails the test unless every token minted is with the renter,
// the provider or the contract, as each should hold.
func (c *testChain) conserved(renter, provider, contract int64) {
	c.t.Helper()
	got := [3]int64{c.balance(c.renterAddr), c.balance(c.providerAddr), c.balance(c.channelsAddr)}
	if want := [3]int64{renter, provider, contract}; got != want {
		c.t.Fatalf("balances renter, provider, contract = %v, want %v", got, want)
	}
	if got[0]+got[1]+got[2] != minted {
		c.t.Fatalf("balances %v do not add up to the %d minted", got, minted)
	}
}

func TestAProviderClosesWithTheLatestVoucher(t *testing.T) {
	c := newTestChain(t)
	ch := c.open(100)
	c.conserved(minted-100, 0, 100)
	c.voucher(ch, 10, 1) // an older voucher the provider holds too
	v2, s2 := c.voucher(ch, 25, 2)
	c.must(c.closeWith(c.provider, v2, s2))
	c.conserved(minted-25, 25, 0)
	// Finished: nothing more pays from it, nor can it be topped up.
	v3, s3 := c.voucher(ch, 30, 3)
	wantRevert(t, "redeem after close", c.redeem(c.provider, v3, s3), "Finished_")
	wantRevert(t, "top-up after close", c.topUp(ch, 10), "Finished_")
	// The pair's next channel has a new ID, and a voucher of the old one
	// pays nothing from it.
	ch2 := c.open(50)
	if ch2 == ch {
		t.Fatal("the pair's second channel has the first one's ID")
	}
	wantRevert(t, "an old channel's voucher on the new one", c.redeem(c.provider, pay.Voucher{Channel: ch2, Amount: v3.Amount, Nonce: v3.Nonce}, s3), "BadSignature")
	wantRevert(t, "a second live channel of the pair", c.send(c.renter, "open", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Open(o, c.providerAddr, c.tokenAddr, big.NewInt(1))
	}), "ChannelExists")
	c.conserved(minted-25-50, 25, 50)
}

func TestRedeemTopUpAndRedeemAgainOnOneChannel(t *testing.T) {
	c := newTestChain(t)
	ch := c.open(100)
	v, s := c.voucher(ch, 60, 1)
	c.must(c.redeem(c.provider, v, s))
	c.conserved(minted-100, 60, 40)
	c.must(c.topUp(ch, 200))
	c.conserved(minted-300, 60, 240)
	v, s = c.voucher(ch, 250, 7) // nonces need only rise
	c.must(c.redeem(c.provider, v, s))
	c.conserved(minted-300, 250, 50)
	// Closing with no voucher returns the rest.
	c.must(c.closeWith(c.provider, pay.Voucher{Channel: ch, Amount: new(big.Int)}, nil))
	c.conserved(minted-250, 250, 0)
}

func TestTheContractRefusesEveryBadVoucher(t *testing.T) {
	c := newTestChain(t)
	ch := c.open(100)
	good, goodSig := c.voucher(ch, 30, 5)
	c.must(c.redeem(c.provider, good, goodSig))

	otherID := common.HexToHash("0x01")
	signedBy := func(d pay.Domain, v pay.Voucher) []byte {
		sig, err := pay.Sign(c.renter, d, v)
		c.must(err)
		return sig
	}
	forged, err := pay.Sign(c.provider, c.domain, pay.Voucher{Channel: ch, Amount: big.NewInt(90), Nonce: 9})
	c.must(err)
	highS := func() []byte { // the same signature with s' = n - s: malleated
		v := pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}
		sig := signedBy(c.domain, v)
		s := new(big.Int).SetBytes(sig[32:64])
		s.Sub(secp256k1.S256().Params().N, s)
		s.FillBytes(sig[32:64])
		sig[64] ^= 1 // 27 <-> 28
		return sig
	}()
	cases := []struct {
		name string
		v    pay.Voucher
		sig  []byte
		want string
	}{
		{"replayed", good, goodSig, "StaleVoucher"},
		{"stale nonce", pay.Voucher{Channel: ch, Amount: big.NewInt(35), Nonce: 4}, signedBy(c.domain, pay.Voucher{Channel: ch, Amount: big.NewInt(35), Nonce: 4}), "StaleVoucher"},
		{"decreasing amount", pay.Voucher{Channel: ch, Amount: big.NewInt(20), Nonce: 6}, signedBy(c.domain, pay.Voucher{Channel: ch, Amount: big.NewInt(20), Nonce: 6}), "DecreasingAmount"},
		{"over the deposit", pay.Voucher{Channel: ch, Amount: big.NewInt(101), Nonce: 6}, signedBy(c.domain, pay.Voucher{Channel: ch, Amount: big.NewInt(101), Nonce: 6}), "OverDeposit"},
		{"another channel's", pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}, signedBy(c.domain, pay.Voucher{Channel: otherID, Amount: big.NewInt(40), Nonce: 6}), "BadSignature"},
		{"another chain's", pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}, signedBy(pay.Domain{ChainID: big.NewInt(1), Contract: c.channelsAddr}, pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}), "BadSignature"},
		{"another contract's", pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}, signedBy(pay.Domain{ChainID: c.chainID, Contract: c.tokenAddr}, pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}), "BadSignature"},
		{"signed by the provider", pay.Voucher{Channel: ch, Amount: big.NewInt(90), Nonce: 9}, forged, "BadSignature"},
		{"a claimed amount the renter did not sign", pay.Voucher{Channel: ch, Amount: big.NewInt(90), Nonce: 6}, signedBy(c.domain, pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}), "BadSignature"},
		{"malleated (high s)", pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}, highS, "BadSignature"},
		{"truncated", pay.Voucher{Channel: ch, Amount: big.NewInt(40), Nonce: 6}, goodSig[:64], "BadSignature"},
	}
	for _, tc := range cases {
		wantRevert(t, tc.name, c.redeem(c.provider, tc.v, tc.sig), tc.want)
		if tc.name != "truncated" && tc.name != "malleated (high s)" && tc.want == "BadSignature" {
			if err := pay.Verify(c.domain, tc.v, tc.sig, c.renterAddr); err == nil {
				t.Errorf("%s: the node's own check takes the voucher the contract refuses", tc.name)
			}
		}
	}
	if _, err := pay.Signer(c.domain, cases[len(cases)-2].v, highS); err == nil {
		t.Error("the node's own check takes a malleated signature")
	}
	// Only the provider redeems, even with a good voucher.
	v, s := c.voucher(ch, 40, 6)
	wantRevert(t, "redeemed by a stranger", c.redeem(c.other, v, s), "NotProvider")
	wantRevert(t, "redeemed by the renter", c.redeem(c.renter, v, s), "NotProvider")
	wantRevert(t, "closed by the renter", c.closeWith(c.renter, v, s), "NotProvider")
	wantRevert(t, "topped up by a stranger", c.send(c.other, "topUp", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.TopUp(o, ch, big.NewInt(1))
	}), "NotRenter")
	c.conserved(minted-100, 30, 70)
	c.must(c.redeem(c.provider, v, s))
	c.conserved(minted-100, 40, 60)
}

func TestARenterClosesAfterTheChallengePeriod(t *testing.T) {
	c := newTestChain(t)
	ch := c.open(100)
	v1, s1 := c.voucher(ch, 20, 1)
	c.must(c.redeem(c.provider, v1, s1))
	c.must(c.startClose(ch))
	wantRevert(t, "a second close", c.startClose(ch), "Closing")
	wantRevert(t, "a top-up while closing", c.topUp(ch, 10), "Closing")
	// The renter holds a newer voucher's worth of service; it may not take
	// its deposit back before the provider had its chance.
	wantRevert(t, "withdraw in the challenge period", c.withdraw(c.renter, ch), "ChallengeOpen")
	c.later(testChallenge / 2 * time.Second)
	wantRevert(t, "withdraw halfway", c.withdraw(c.renter, ch), "ChallengeOpen")
	v2, s2 := c.voucher(ch, 70, 2)
	c.must(c.redeem(c.provider, v2, s2)) // the challenge: a newer voucher
	c.conserved(minted-100, 70, 30)
	wantRevert(t, "withdraw by the provider", c.withdraw(c.provider, ch), "NotRenter")
	c.later(testChallenge * time.Second)
	v3, s3 := c.voucher(ch, 80, 3)
	wantRevert(t, "a voucher after the challenge period", c.redeem(c.provider, v3, s3), "Closing")
	c.must(c.withdraw(c.renter, ch))
	c.conserved(minted-70, 70, 0)
	wantRevert(t, "a second withdraw", c.withdraw(c.renter, ch), "Finished_")
}

func TestACloseRacingATopUpLosesNoToken(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		c := newTestChain(t)
		ch := c.open(100)
		v, s := c.voucher(ch, 40, 1)
		// Both are sent into one block, gas set by hand so that the loser is
		// mined (and reverts) rather than refused at estimation.
		send := func(k bool) *types.Transaction {
			if k {
				o := c.opts(c.provider)
				o.GasLimit = 1_000_000
				tx, err := c.channels.Close(o, ch, v.Amount, v.Nonce, s)
				c.must(err)
				return tx
			}
			o := c.opts(c.renter)
			o.GasLimit = 1_000_000
			tx, err := c.channels.TopUp(o, ch, big.NewInt(500))
			c.must(err)
			return tx
		}
		first, second := send(closeFirst), send(!closeFirst)
		c.sim.Commit()
		var statuses []uint64
		for _, tx := range []*types.Transaction{first, second} {
			r, err := bind.WaitMined(context.Background(), c.sim.Client(), tx)
			c.must(err)
			statuses = append(statuses, r.Status)
		}
		if closeStatus := statuses[map[bool]int{true: 0, false: 1}[closeFirst]]; closeStatus != types.ReceiptStatusSuccessful {
			t.Fatalf("close first %v: the provider's close reverted beside a top-up", closeFirst)
		}
		ch_, err := c.channels.Channels(nil, ch)
		c.must(err)
		if !ch_.Finished {
			t.Fatalf("close first %v: the channel is not finished (statuses %v)", closeFirst, statuses)
		}
		// Whichever came first, the contract holds nothing and the top-up
		// either went back to the renter with the rest or never left it.
		c.conserved(minted-40, 40, 0)
	}
}

func TestVouchersSignedHereRecoverInTheContract(t *testing.T) {
	c := newTestChain(t)
	ch := c.open(100)
	for _, amount := range []int64{0, 1, 99} {
		v := pay.Voucher{Channel: ch, Amount: big.NewInt(amount), Nonce: uint64(amount) + 1}
		got, err := c.channels.VoucherDigest(nil, v.Channel, v.Amount, v.Nonce)
		c.must(err)
		if want := c.domain.Digest(v); common.Hash(got) != want {
			t.Fatalf("digest of %d: contract %x, node %x", amount, got, want)
		}
	}
	typ, err := c.channels.VOUCHERTYPEHASH(nil)
	c.must(err)
	if common.Hash(typ) != crypto.Keccak256Hash([]byte("Voucher(bytes32 channel,uint256 amount,uint64 nonce)")) {
		t.Fatal("the contract's voucher type is not the node's")
	}
}
