// Package evm is idlegrid's payment channel contract on an EVM chain:
// the Solidity source and its build (contracts/), the Go bindings abigen
// made from it, and Chain, which opens, funds, redeems and closes
// channels through any Ethereum JSON-RPC endpoint (or go-ethereum's
// simulated backend in tests and the devstack).
package evm

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/idlegrid/idlegrid/node/pay"
)

// Backend is what Chain needs of an endpoint: an ethclient.Client, or a
// simulated backend's client.
type Backend interface {
	bind.ContractBackend
	bind.DeployBackend
	ChainID(ctx context.Context) (*big.Int, error)
	BalanceAt(ctx context.Context, account common.Address, block *big.Int) (*big.Int, error)
}

var _ Backend = (*ethclient.Client)(nil)

// Chain is the channel contract and token on one chain, for one wallet.
type Chain struct {
	B        Backend
	ID       *big.Int
	Contract common.Address
	Token    common.Address
	Key      *ecdsa.PrivateKey
	Domain   pay.Domain
	// Mine, when set, mines a block after each transaction sent: a
	// simulated chain's Commit. Unset, send waits for the chain to mine.
	Mine func()
	// LastGas is the gas the last transaction sent used.
	LastGas atomic.Uint64

	channels *PaymentChannels
	token    *TestToken // the ERC-20 calls every token has (balanceOf, approve, allowance)
	abi      *abi.ABI
}

// Dial opens rpcURL and checks that the chain is chainID and that a
// contract is at contract.
func Dial(ctx context.Context, rpcURL string, chainID uint64, contract, token common.Address, key *ecdsa.PrivateKey) (*Chain, error) {
	c, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		return nil, fmt.Errorf("settlement.evm.rpc_url %s: %w", rpcURL, err)
	}
	ch, err := New(ctx, c, contract, token, key)
	if err != nil {
		c.Close()
		return nil, err
	}
	if ch.ID.Uint64() != chainID || !ch.ID.IsUint64() {
		c.Close()
		return nil, fmt.Errorf("settlement.evm.chain_id is %d, but %s serves chain %s", chainID, rpcURL, ch.ID)
	}
	return ch, nil
}

// New is the contract at contract on b, paying in token, for key.
func New(ctx context.Context, b Backend, contract, token common.Address, key *ecdsa.PrivateKey) (*Chain, error) {
	id, err := b.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain ID: %w", err)
	}
	code, err := b.CodeAt(ctx, contract, nil)
	if err != nil {
		return nil, fmt.Errorf("settlement.evm.contract %s: %w", contract, err)
	}
	if len(code) == 0 {
		return nil, fmt.Errorf("settlement.evm.contract %s: no contract at that address on chain %s", contract, id)
	}
	c := &Chain{B: b, ID: id, Contract: contract, Token: token, Key: key, Domain: pay.NewDomain(id, contract)}
	if c.channels, err = NewPaymentChannels(contract, b); err != nil {
		return nil, err
	}
	if c.token, err = NewTestToken(token, b); err != nil {
		return nil, err
	}
	if c.abi, err = PaymentChannelsMetaData.GetAbi(); err != nil {
		return nil, err
	}
	return c, nil
}

// Address is the wallet's address.
func (c *Chain) Address() common.Address { return crypto.PubkeyToAddress(c.Key.PublicKey) }

// Balances are what an address holds: the chain's coin (for gas) and the
// token, in base units.
type Balances struct {
	Coin, Token *big.Int
}

// BalancesOf reads a's balances.
func (c *Chain) BalancesOf(ctx context.Context, a common.Address) (Balances, error) {
	coin, err := c.B.BalanceAt(ctx, a, nil)
	if err != nil {
		return Balances{}, err
	}
	tok, err := c.token.BalanceOf(&bind.CallOpts{Context: ctx}, a)
	if err != nil {
		return Balances{}, fmt.Errorf("token %s: %w", c.Token, err)
	}
	return Balances{Coin: coin, Token: tok}, nil
}

// Channel is a channel's state on chain.
type Channel = pay.Channel

var _ pay.Chain = (*Chain)(nil)

// Channel reads channel id; an ID the contract never saw is an error.
func (c *Chain) Channel(ctx context.Context, id common.Hash) (Channel, error) {
	s, err := c.channels.Channels(&bind.CallOpts{Context: ctx}, id)
	if err != nil {
		return Channel{}, err
	}
	if s.Renter == (common.Address{}) {
		return Channel{}, fmt.Errorf("channel %s: unknown to contract %s", id, c.Contract)
	}
	ch := Channel{ID: id, Renter: s.Renter, Provider: s.Provider, Token: s.Token, Deposit: s.Deposit, Paid: s.Paid, Nonce: s.Nonce, Finished: s.Finished}
	if s.ClosesAt != 0 {
		ch.ClosesAt = time.Unix(int64(s.ClosesAt), 0)
	}
	return ch, nil
}

// ChannelsOf lists the channels a opened as a renter or is paid by as a
// provider, oldest first, from the contract's Opened events.
func (c *Chain) ChannelsOf(ctx context.Context, a common.Address) ([]common.Hash, error) {
	var ids []common.Hash
	for _, q := range [][2][]common.Address{{{a}, nil}, {nil, {a}}} {
		it, err := c.channels.FilterOpened(&bind.FilterOpts{Context: ctx}, nil, q[0], q[1])
		if err != nil {
			return nil, err
		}
		for it.Next() {
			ids = append(ids, it.Event.Id)
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// LiveChannel is the open channel from renter to provider in the
// chain's token; ok false when there is none.
func (c *Chain) LiveChannel(ctx context.Context, renter, provider common.Address) (id common.Hash, ok bool, err error) {
	pair := crypto.Keccak256Hash(common.LeftPadBytes(renter[:], 32), common.LeftPadBytes(provider[:], 32), common.LeftPadBytes(c.Token[:], 32))
	live, err := c.channels.Live(&bind.CallOpts{Context: ctx}, pair)
	if err != nil {
		return common.Hash{}, false, err
	}
	return live, live != [32]byte{}, nil
}

// Open funds a new channel from the wallet to provider with amount,
// approving the contract for it first where the allowance is short: two
// transactions the first time, then one.
func (c *Chain) Open(ctx context.Context, provider common.Address, amount *big.Int) (common.Hash, error) {
	if err := c.approve(ctx, amount); err != nil {
		return common.Hash{}, err
	}
	id, err := c.channels.ChannelId(&bind.CallOpts{Context: ctx}, c.Address(), provider, c.Token)
	if err != nil {
		return common.Hash{}, err
	}
	if err := c.send(ctx, "open", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Open(o, provider, c.Token, amount)
	}); err != nil {
		return common.Hash{}, err
	}
	return id, nil
}

// TopUp adds amount to channel id.
func (c *Chain) TopUp(ctx context.Context, id common.Hash, amount *big.Int) error {
	if err := c.approve(ctx, amount); err != nil {
		return err
	}
	return c.send(ctx, "top up", func(o *bind.TransactOpts) (*types.Transaction, error) { return c.channels.TopUp(o, id, amount) })
}

// Redeem pays the provider (the wallet) what v adds to the channel's paid.
func (c *Chain) Redeem(ctx context.Context, v pay.Voucher, sig []byte) error {
	return c.send(ctx, "redeem", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Redeem(o, v.Channel, v.Amount, v.Nonce, sig)
	})
}

// Close is the provider's close with its latest voucher (sig nil: none).
func (c *Chain) Close(ctx context.Context, v pay.Voucher, sig []byte) error {
	amount := v.Amount
	if amount == nil {
		amount = new(big.Int)
	}
	return c.send(ctx, "close", func(o *bind.TransactOpts) (*types.Transaction, error) {
		return c.channels.Close(o, v.Channel, amount, v.Nonce, sig)
	})
}

// StartClose is the renter's close: the rest comes back after the
// challenge period, through Withdraw.
func (c *Chain) StartClose(ctx context.Context, id common.Hash) error {
	return c.send(ctx, "start close", func(o *bind.TransactOpts) (*types.Transaction, error) { return c.channels.StartClose(o, id) })
}

// Withdraw takes back a closing channel's rest once its challenge ended.
func (c *Chain) Withdraw(ctx context.Context, id common.Hash) error {
	return c.send(ctx, "withdraw", func(o *bind.TransactOpts) (*types.Transaction, error) { return c.channels.Withdraw(o, id) })
}

func (c *Chain) approve(ctx context.Context, amount *big.Int) error {
	have, err := c.token.Allowance(&bind.CallOpts{Context: ctx}, c.Address(), c.Contract)
	if err != nil {
		return fmt.Errorf("token %s: %w", c.Token, err)
	}
	if have.Cmp(amount) >= 0 {
		return nil
	}
	return c.send(ctx, "approve", func(o *bind.TransactOpts) (*types.Transaction, error) { return c.token.Approve(o, c.Contract, amount) })
}

// send signs and sends one transaction and waits until it is mined; a
// revert is named by the contract's error.
func (c *Chain) send(ctx context.Context, what string, f func(*bind.TransactOpts) (*types.Transaction, error)) error {
	o, err := bind.NewKeyedTransactorWithChainID(c.Key, c.ID)
	if err != nil {
		return err
	}
	o.Context = ctx
	tx, err := f(o)
	if err != nil {
		return fmt.Errorf("%s: %w", what, c.named(err))
	}
	if c.Mine != nil {
		c.Mine()
	}
	wait, cancel := context.WithTimeout(ctx, MineWait)
	defer cancel()
	r, err := waitMined(wait, c.B, tx.Hash())
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("%s: transaction %s reverted", what, tx.Hash())
	}
	c.LastGas.Store(r.GasUsed)
	return nil
}

// MineWait is how long send waits for a transaction to be mined.
const MineWait = 5 * time.Minute

// waitMined polls for a transaction's receipt from 50 ms on, doubling to
// a second: a loopback chain answers in a block (bind.WaitMined polls
// once a second). Any error is taken for "not yet" (a node right after a
// block may say its index is in progress) until ctx ends.
func waitMined(ctx context.Context, b Backend, h common.Hash) (*types.Receipt, error) {
	every := 50 * time.Millisecond
	for {
		r, err := b.TransactionReceipt(ctx, h)
		if err == nil {
			return r, nil
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("transaction %s not mined: %w (last: %v)", h, ctx.Err(), err)
		case <-t.C:
		}
		every = min(2*every, time.Second)
	}
}

// ErrRefused is a call the contract refused; its text names the error.
var ErrRefused = errors.New("the channel contract refused")

func (c *Chain) named(err error) error {
	if name, ok := revertName(err, c.abi); ok {
		return fmt.Errorf("%w: %s", ErrRefused, name)
	}
	return err
}

// revertName is the custom error of the first of abis that a reverted
// call's data names.
func revertName(err error, abis ...*abi.ABI) (string, bool) {
	data, ok := ethclient.RevertErrorData(err)
	if !ok || len(data) < 4 {
		return "", false
	}
	for _, a := range abis {
		if a == nil {
			continue
		}
		if e, err := a.ErrorByID([4]byte(data[:4])); err == nil {
			return e.Name, true
		}
	}
	return "", false
}

// Disconnect closes the connection to the chain, where the backend has
// one.
func (c *Chain) Disconnect() {
	if cl, ok := c.B.(interface{ Close() }); ok {
		cl.Close()
	}
}
