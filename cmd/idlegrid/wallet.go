package main

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	"github.com/spf13/cobra"
)

// chainOf dials the chain [settlement.evm] names, for the repository's
// wallet; an error says what to set where settlement is not evm.
func (e *env) chainOf() (*evm.Chain, config.Config, error) {
	r, cfg, err := e.openRepo()
	if err != nil {
		return nil, cfg, err
	}
	key, err := r.Wallet()
	if err != nil {
		return nil, cfg, err
	}
	ch, err := e.dialChain(cfg, key)
	return ch, cfg, err
}

// channelArg reads a command's CHANNEL_ID and dials the chain.
func (e *env) channelArg(args []string) (*evm.Chain, config.Config, common.Hash, error) {
	id, err := channelID(args[0])
	if err != nil {
		return nil, config.Config{}, id, err
	}
	ch, cfg, err := e.chainOf()
	return ch, cfg, id, err
}

// dialChain dials the chain of cfg's [settlement.evm] for key.
func (e *env) dialChain(cfg config.Config, key *ecdsa.PrivateKey) (*evm.Chain, error) {
	s := cfg.Settlement
	if s.Kind != config.SettleEVM {
		return nil, fmt.Errorf("settlement.kind is %q: channels need \"evm\" and [settlement.evm]'s rpc_url, chain_id, contract and token (`idlegrid config set settlement.kind evm`, …)", s.Kind)
	}
	return evm.Dial(e.ctx, s.EVM.RPCURL, s.EVM.ChainID, common.HexToAddress(s.EVM.Contract), common.HexToAddress(s.EVM.Token), key)
}

type walletView struct {
	Address  string `json:"address"`
	Kind     string `json:"settlement"`
	ChainID  uint64 `json:"chain_id,omitempty"`
	Coin     string `json:"coin_wei,omitempty"`
	Token    string `json:"token_units,omitempty"`
	TokenUSD string `json:"token,omitempty"`
}

func newWalletCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "wallet",
		Short: "Show this node's wallet address and, with settlement evm, its balances",
		Long: `Show this node's wallet: the secp256k1 key in the repository's wallet.key
(made by init, mode 0600, never the libp2p identity) that signs vouchers
and channel transactions. With [settlement] kind = "evm" it also shows the
chain's coin (for gas) and the token's balance.

Back wallet.key up: the channels it opened pay back only to it.`,
		Example: `  idlegrid wallet
  idlegrid wallet --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			r, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			key, err := r.Wallet()
			if err != nil {
				return err
			}
			v := walletView{Address: crypto.PubkeyToAddress(key.PublicKey).Hex(), Kind: cfg.Settlement.Kind}
			if cfg.Settlement.Kind == config.SettleEVM {
				ch, err := e.dialChain(cfg, key)
				if err != nil {
					return err
				}
				b, err := ch.BalancesOf(e.ctx, ch.Address())
				if err != nil {
					return err
				}
				v.ChainID, v.Coin, v.Token = ch.ID.Uint64(), b.Coin.String(), b.Token.String()
				v.TokenUSD = showUnits(b.Token, cfg.Settlement.EVM.UnitsPerMicro)
			}
			if e.asJSON {
				return e.printJSON(v)
			}
			fmt.Fprintf(e.stdout, "address     %s\nsettlement  %s\n", v.Address, v.Kind)
			if v.ChainID != 0 {
				fmt.Fprintf(e.stdout, "chain       %d\ncoin        %s wei\ntoken       %s\n", v.ChainID, v.Coin, v.TokenUSD)
			}
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}

// showUnits is token base units in the currency: "12.5" for 12,500,000
// units of a 6-decimal token.
func showUnits(units *big.Int, perMicro uint64) string {
	micros := new(big.Int).Quo(units, new(big.Int).SetUint64(max(perMicro, 1)))
	if !micros.IsUint64() {
		return micros.String() + " micro-units"
	}
	return market.FormatPrice(micros.Uint64())
}

// unitsOf reads an amount in the currency ("10", "2.5") as token units.
func unitsOf(flag, s string, perMicro uint64) (*big.Int, error) {
	micros, err := market.ParsePrice(s)
	if err != nil || micros == 0 {
		return nil, usagef("--%s %q: want an amount above 0 in the currency, with at most 6 decimal places, such as 10 or 2.5", flag, s)
	}
	return new(big.Int).Mul(new(big.Int).SetUint64(micros), new(big.Int).SetUint64(perMicro)), nil
}

type channelView struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	Renter   string `json:"renter"`
	Provider string `json:"provider"`
	Deposit  string `json:"deposit"`
	Paid     string `json:"paid"`
	Nonce    uint64 `json:"nonce"`
	ClosesAt string `json:"closes_at,omitempty"`
	Finished bool   `json:"finished"`
	State    string `json:"state"`
}

func viewChannel(c evm.Channel, me common.Address, perMicro uint64) channelView {
	v := channelView{ID: c.ID.Hex(), Role: "renter", Renter: c.Renter.Hex(), Provider: c.Provider.Hex(),
		Deposit: showUnits(c.Deposit, perMicro), Paid: showUnits(c.Paid, perMicro), Nonce: c.Nonce, Finished: c.Finished, State: "open"}
	if c.Provider == me {
		v.Role = "provider"
	}
	switch {
	case c.Finished:
		v.State = "finished"
	case !c.ClosesAt.IsZero():
		v.ClosesAt, v.State = c.ClosesAt.UTC().Format(time.RFC3339), "closing"
	}
	return v
}

func newChannelCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "channel",
		Short: "Open, fund, close and list payment channels (settlement evm)",
		Long: `A payment channel holds a renter's deposit for one provider on the chain
[settlement.evm] names. The renter opens it once and pays each lease by
signing vouchers as the job's telemetry beats arrive; the provider's daemon
redeems the latest voucher on a schedule (or 'channel redeem' now), so many
leases cost no transaction.

A renter closes a channel in two steps: "close" starts the challenge
period (in which the provider may still redeem its latest voucher), and
"close" again after it takes back what was not paid.`,
		Example: `  idlegrid channel open 0xPROVIDER_WALLET --amount 10
  idlegrid channel topup 0xCHANNEL_ID --amount 5
  idlegrid channel list --json
  idlegrid channel close 0xCHANNEL_ID
  idlegrid channel redeem              # a provider: redeem its vouchers now`,
	}
	var amount string
	open := &cobra.Command{
		Use:   "open PROVIDER_ADDRESS",
		Short: "Open and fund a channel to a provider's wallet address",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if !common.IsHexAddress(args[0]) {
				return usagef("PROVIDER_ADDRESS %q: want the provider's 0x wallet address (`idlegrid wallet` on its node)", args[0])
			}
			ch, cfg, err := e.chainOf()
			if err != nil {
				return err
			}
			if amount == "" {
				amount = market.FormatPrice(uint64(cfg.Settlement.EVM.Deposit * 1e6))
			}
			units, err := unitsOf("amount", amount, cfg.Settlement.EVM.UnitsPerMicro)
			if err != nil {
				return err
			}
			id, err := ch.Open(e.ctx, common.HexToAddress(args[0]), units)
			if err != nil {
				return err
			}
			return e.showChannel(ch, id, cfg)
		},
	}
	open.Flags().StringVar(&amount, "amount", "", "deposit in the currency (default settlement.evm.deposit)")
	topup := &cobra.Command{
		Use:   "topup CHANNEL_ID",
		Short: "Add to a channel's deposit",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ch, cfg, id, err := e.channelArg(args)
			if err != nil {
				return err
			}
			units, err := unitsOf("amount", amount, cfg.Settlement.EVM.UnitsPerMicro)
			if err != nil {
				return err
			}
			if err := ch.TopUp(e.ctx, id, units); err != nil {
				return err
			}
			return e.showChannel(ch, id, cfg)
		},
	}
	topup.Flags().StringVar(&amount, "amount", "", "what to add, in the currency")
	closeCmd := &cobra.Command{
		Use:   "close CHANNEL_ID",
		Short: "A renter's close: start the challenge period, or, after it, take back the rest",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ch, cfg, id, err := e.channelArg(args)
			if err != nil {
				return err
			}
			st, err := ch.Channel(e.ctx, id)
			if err != nil {
				return err
			}
			switch {
			case st.Renter != ch.Address():
				return fmt.Errorf("channel %s pays from %s, not this wallet (%s): a provider's daemon redeems the latest voucher it holds by itself, or now with `idlegrid channel redeem`", id, st.Renter, ch.Address())
			case st.Finished:
				return fmt.Errorf("channel %s is finished already", id)
			case st.ClosesAt.IsZero():
				err = ch.StartClose(e.ctx, id)
			default:
				err = ch.Withdraw(e.ctx, id)
				if errors.Is(err, evm.ErrRefused) {
					return fmt.Errorf("channel %s: its challenge period ends at %s; close again after it (%w)", id, st.ClosesAt.UTC().Format(time.RFC3339), err)
				}
			}
			if err != nil {
				return err
			}
			return e.showChannel(ch, id, cfg)
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the channels this wallet opened or is paid by",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ch, cfg, err := e.chainOf()
			if err != nil {
				return err
			}
			ids, err := ch.ChannelsOf(e.ctx, ch.Address())
			if err != nil {
				return err
			}
			views := make([]channelView, 0, len(ids))
			for _, id := range ids {
				st, err := ch.Channel(e.ctx, id)
				if err != nil {
					return err
				}
				views = append(views, viewChannel(st, ch.Address(), cfg.Settlement.EVM.UnitsPerMicro))
			}
			return e.printList(views, len(views), "no channels: a renter opens one with `idlegrid channel open PROVIDER_ADDRESS`", func(w io.Writer) {
				fmt.Fprintln(w, "ID\tROLE\tSTATE\tDEPOSIT\tPAID\tNONCE")
				for _, v := range views {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", v.ID, v.Role, v.State, v.Deposit, v.Paid, v.Nonce)
				}
			})
		},
	}
	redeem := &cobra.Command{
		Use:   "redeem",
		Short: "A provider's redemption now: the latest voucher of each channel that pays it",
		Long: `Redeem on chain, now, the latest voucher of each channel that pays this
provider more than the chain has paid: what the provider's daemon does by
itself every settlement.evm.redeem_every, when a voucher nears
redeem_at_percent of its deposit, and when the renter starts to close.
One transaction per channel redeemed. Through the daemon when one runs,
else from the repository.`,
		Example: `  idlegrid channel redeem
  idlegrid channel redeem --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			var res api.RedeemResult
			err := e.apiCall(func(c api.Node) (err error) { res, err = c.Redeem(e.ctx); return })
			if errors.Is(err, api.ErrNoDaemon) {
				n, done, lerr := e.lightNode(nil, false)
				if lerr != nil {
					return lerr
				}
				defer done()
				res, err = n.Redeem(e.ctx)
			}
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(res)
			}
			fmt.Fprintf(e.stdout, "redeemed the latest voucher of %d channel(s) to wallet %s\n", res.Redeemed, res.Wallet)
			return nil
		},
	}
	for _, sub := range []*cobra.Command{open, topup, closeCmd, list, redeem} {
		addJSONFlag(sub, e)
		c.AddCommand(sub)
	}
	return c
}

func (e *env) showChannel(ch *evm.Chain, id common.Hash, cfg config.Config) error {
	st, err := ch.Channel(e.ctx, id)
	if err != nil {
		return err
	}
	v := viewChannel(st, ch.Address(), cfg.Settlement.EVM.UnitsPerMicro)
	if e.asJSON {
		return e.printJSON(v)
	}
	fmt.Fprintf(e.stdout, "channel   %s\nstate     %s\nrenter    %s\nprovider  %s\ndeposit   %s\npaid      %s\n", v.ID, v.State, v.Renter, v.Provider, v.Deposit, v.Paid)
	if v.ClosesAt != "" {
		fmt.Fprintf(e.stdout, "closes    %s (then `idlegrid channel close %s` takes back the rest)\n", v.ClosesAt, v.ID)
	}
	return nil
}

func channelID(s string) (common.Hash, error) {
	b := common.FromHex(s)
	if len(b) != 32 || len(s) != 66 {
		return common.Hash{}, usagef("CHANNEL_ID %q: want the channel's 0x-prefixed 32-byte ID (`idlegrid channel list`)", s)
	}
	return common.BytesToHash(b), nil
}
