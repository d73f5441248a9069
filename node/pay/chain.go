package pay

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Channel is a channel's state on chain.
type Channel struct {
	ID                      common.Hash
	Renter, Provider, Token common.Address
	Deposit, Paid           *big.Int
	Nonce                   uint64
	ClosesAt                time.Time // zero: no close started
	Finished                bool
}

// Chain is what a node's payments need of the chain that holds its
// channels (pay/evm's Chain on an EVM chain): reads, a renter's opening,
// and a provider's redemption.
type Chain interface {
	// Address is the wallet's address.
	Address() common.Address
	// Channel reads a channel; one the contract never saw is an error.
	Channel(ctx context.Context, id common.Hash) (Channel, error)
	// LiveChannel is the open channel from renter to provider in the
	// chain's token; ok false when there is none.
	LiveChannel(ctx context.Context, renter, provider common.Address) (id common.Hash, ok bool, err error)
	// Open funds a new channel from the wallet to provider.
	Open(ctx context.Context, provider common.Address, amount *big.Int) (common.Hash, error)
	// Redeem pays the wallet, the channel's provider, what v adds to the
	// channel's paid, keeping the channel open.
	Redeem(ctx context.Context, v Voucher, sig []byte) error
}
