package node

import (
	"context"
	"math"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	ds "github.com/ipfs/go-datastore"
)

// openWallet dials the chain of [settlement.evm] when leases are paid by
// channel (settlement kind evm): a node that cannot reach its chain, or
// finds another chain or no contract there, fails to start and says
// which setting is wrong.
func (n *Node) openWallet(ctx context.Context) (func() error, error) {
	s := n.cfg.Settlement
	if s.Kind != config.SettleEVM {
		return nil, nil
	}
	key, err := n.repo.Wallet()
	if err != nil {
		return nil, err
	}
	e := s.EVM
	c, err := evm.Dial(ctx, e.RPCURL, e.ChainID, common.HexToAddress(e.Contract), common.HexToAddress(e.Token), key)
	if err != nil {
		return nil, err
	}
	deposit := new(big.Int).Mul(big.NewInt(int64(math.Round(e.Deposit*1e6))), new(big.Int).SetUint64(e.UnitsPerMicro))
	n.wallet = &pay.Wallet{
		Key: key, Chain: c, Deposit: deposit, RedeemAt: e.RedeemAt, RedeemEvery: e.RedeemEvery.Std(), Clock: n.clock,
		Log: n.opts.Logger.With("subsystem", LogNode),
		Settlement: &pb.Settlement{Kind: pb.SettlementKind_SETTLEMENT_EVM, ChainId: e.ChainID, Contract: c.Contract.Bytes(), Token: c.Token.Bytes(),
			UnitsPerMicro: e.UnitsPerMicro, Payee: c.Address().Bytes()},
	}
	return func() error { c.Disconnect(); return nil }, nil
}

// pays is what this node's bids pay with: nil (the ledger) but with
// settlement evm.
func (n *Node) pays() *pb.Settlement {
	if n.wallet == nil {
		return nil
	}
	return n.wallet.Pays()
}

// settlements are the ways to pay this provider's offers list: its
// wallet's channel with settlement evm, none with settlement none, and
// nothing (the ledger) by default.
func (n *Node) settlements() []*pb.Settlement {
	switch {
	case n.wallet != nil:
		return []*pb.Settlement{n.wallet.Settlement}
	case n.cfg.Settlement.Kind == config.SettleNone:
		return []*pb.Settlement{{Kind: pb.SettlementKind_SETTLEMENT_NONE}}
	}
	return nil
}

// noLedger settles nothing: settlement kind none books no receipt.
type noLedger struct{}

func (noLedger) Settle(context.Context, ds.Batch, string, *pb.Receipt) error { return nil }

// Redeem redeems now, on a provider paid by channel, the latest voucher
// of each channel that pays more than the chain has: what its daemon does
// on its schedule (settlement.evm.redeem_every). A node with settlement
// other than evm has nothing to redeem: a conflict.
func (n *Node) Redeem(ctx context.Context) (api.RedeemResult, error) {
	if n.wallet == nil {
		return api.RedeemResult{}, fault.Conflictf("settlement.kind is %q: only a node paid by channel (evm) has vouchers to redeem", n.cfg.Settlement.Kind)
	}
	recs, err := n.leaseStore().All(ctx)
	if err != nil {
		return api.RedeemResult{}, err
	}
	return api.RedeemResult{Wallet: n.wallet.Address().Hex(), Redeemed: n.wallet.RedeemDue(ctx, recs, true)}, nil
}

// WalletAddress is the node's wallet address with settlement evm; zero
// otherwise.
func (n *Node) WalletAddress() common.Address {
	if n.wallet == nil {
		return common.Address{}
	}
	return n.wallet.Address()
}
