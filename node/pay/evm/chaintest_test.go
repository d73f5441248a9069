package evm

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/idlegrid/idlegrid/node/pay"
)

// testChain is a real EVM in process (go-ethereum's simulated backend)
// with the channel contract and a test token deployed, and three funded
// accounts: a renter, a provider and a stranger.
type testChain struct {
	t                        testing.TB
	sim                      *simulated.Backend
	renter, provider, other  *ecdsa.PrivateKey
	token                    *TestToken
	tokenAddr                common.Address
	channels                 *PaymentChannels
	channelsAddr             common.Address
	domain                   pay.Domain
	channelsABI              *abi.ABI
	chainID                  *big.Int
	renterAddr, providerAddr common.Address
}

const testChallenge = 3600 // seconds

func newTestChain(t testing.TB) *testChain {
	t.Helper()
	c := &testChain{t: t}
	alloc := types.GenesisAlloc{}
	for _, k := range []**ecdsa.PrivateKey{&c.renter, &c.provider, &c.other} {
		key, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		*k = key
		alloc[crypto.PubkeyToAddress(key.PublicKey)] = types.Account{Balance: new(big.Int).Lsh(big.NewInt(1), 100)}
	}
	c.renterAddr, c.providerAddr = crypto.PubkeyToAddress(c.renter.PublicKey), crypto.PubkeyToAddress(c.provider.PublicKey)
	c.sim = simulated.NewBackend(alloc, OsakaRules)
	t.Cleanup(func() { c.sim.Close() })
	id, err := c.sim.Client().ChainID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.chainID = id
	var tx *types.Transaction
	c.tokenAddr, tx, c.token, err = DeployTestToken(c.opts(c.other), c.sim.Client())
	c.mined("deploy token", tx, err)
	c.channelsAddr, tx, c.channels, err = DeployPaymentChannels(c.opts(c.other), c.sim.Client(), testChallenge)
	c.mined("deploy channels", tx, err)
	c.domain = pay.Domain{ChainID: id, Contract: c.channelsAddr}
	if c.channelsABI, err = PaymentChannelsMetaData.GetAbi(); err != nil {
		t.Fatal(err)
	}
	c.must(c.send(c.other, "mint", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.token.Mint(o, c.renterAddr, big.NewInt(1_000_000_000))
	}))
	c.must(c.send(c.renter, "approve", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.token.Approve(o, c.channelsAddr, new(big.Int).Lsh(big.NewInt(1), 200))
	}))
	return c
}

func (c *testChain) opts(k *ecdsa.PrivateKey) *bind.TransactOpts {
	o, err := bind.NewKeyedTransactorWithChainID(k, c.chainID)
	if err != nil {
		c.t.Fatal(err)
	}
	return o
}

func (c *testChain) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// mined commits a block and fails the test unless tx succeeded in it.
func (c *testChain) mined(what string, tx *types.Transaction, err error) *types.Receipt {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("%s: %v", what, c.named(err))
	}
	// A block committed may miss a transaction the pool has not yet
	// taken in (or fail to seal, which Commit only logs): commit again
	// until it is mined, within a bound, rather than wait on one block.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var r *types.Receipt
	for r == nil {
		c.sim.Commit()
		if r, err = c.sim.Client().TransactionReceipt(ctx, tx.Hash()); err != nil && ctx.Err() != nil {
			c.t.Fatalf("%s: not mined: %v", what, err)
		}
	}
	if r.Status != types.ReceiptStatusSuccessful {
		c.t.Fatalf("%s: reverted", what)
	}
	return r
}

// send sends one transaction from k and mines it; the error is the
// contract's custom error by name when it reverts.
func (c *testChain) send(k *ecdsa.PrivateKey, method string, f func(*bind.TransactOpts) (*types.Transaction, error)) error {
	c.t.Helper()
	tx, err := f(c.opts(k))
	if err != nil {
		return c.named(err)
	}
	c.mined(method, tx, nil)
	return nil
}

// revert is a call the contract refused, named by its custom error.
type revert struct{ name string }

func (r revert) Error() string { return "reverted: " + r.name }

func (c *testChain) named(err error) error {
	if name, ok := revertName(err, c.channelsABI, mustABI(TestTokenMetaData)); ok {
		return revert{name}
	}
	return err
}

func mustABI(m *bind.MetaData) *abi.ABI {
	a, err := m.GetAbi()
	if err != nil {
		panic(err)
	}
	return a
}

// wantRevert fails the test unless err is the contract refusing with name.
func wantRevert(t testing.TB, what string, err error, name string) {
	t.Helper()
	var r revert
	if !errors.As(err, &r) || r.name != name {
		t.Fatalf("%s: got %v, want the contract to refuse with %s", what, err, name)
	}
}

func (c *testChain) balance(a common.Address) int64 {
	c.t.Helper()
	b, err := c.token.BalanceOf(nil, a)
	c.must(err)
	return b.Int64()
}

func (c *testChain) open(amount int64) common.Hash {
	c.t.Helper()
	id, err := c.channels.ChannelId(nil, c.renterAddr, c.providerAddr, c.tokenAddr)
	c.must(err)
	c.must(c.send(c.renter, "open", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Open(o, c.providerAddr, c.tokenAddr, big.NewInt(amount))
	}))
	return id
}

func (c *testChain) voucher(ch common.Hash, amount int64, nonce uint64) (pay.Voucher, []byte) {
	c.t.Helper()
	v := pay.Voucher{Channel: ch, Amount: big.NewInt(amount), Nonce: nonce}
	sig, err := pay.Sign(c.renter, c.domain, v)
	c.must(err)
	return v, sig
}

func (c *testChain) redeem(from *ecdsa.PrivateKey, v pay.Voucher, sig []byte) error {
	return c.send(from, "redeem", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Redeem(o, v.Channel, v.Amount, v.Nonce, sig)
	})
}

func (c *testChain) closeWith(from *ecdsa.PrivateKey, v pay.Voucher, sig []byte) error {
	return c.send(from, "close", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Close(o, v.Channel, v.Amount, v.Nonce, sig)
	})
}

func (c *testChain) topUp(ch common.Hash, amount int64) error {
	return c.send(c.renter, "topUp", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.TopUp(o, ch, big.NewInt(amount))
	})
}

func (c *testChain) startClose(ch common.Hash) error {
	return c.send(c.renter, "startClose", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.StartClose(o, ch)
	})
}

func (c *testChain) withdraw(from *ecdsa.PrivateKey, ch common.Hash) error {
	return c.send(from, "withdraw", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Withdraw(o, ch)
	})
}

// later moves the chain's clock on by d and mines a block at it. The
// simulated chain moves its clock only while its pool holds nothing
// pending, and its pool drops the transactions a block mined in a loop of
// its own, after the block: later waits for that (10 s at most).
func (c *testChain) later(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.sim.AdjustTime(d)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "non-empty block") || time.Now().After(deadline) {
			c.t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // the pool's own loop, which signals nothing
	}
	c.sim.Commit()
}
