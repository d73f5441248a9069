package config

import (
	"net/url"
	"regexp"
	"time"
)

// Settlement kinds, as [settlement] kind spells them (market.SettlementName).
const (
	SettleLedger = "ledger"
	SettleNone   = "none"
	SettleEVM    = "evm"
)

// SettlementConfig is how this node's leases are paid.
type SettlementConfig struct {
	Kind string    `toml:"kind" comment:"how leases are paid: ledger (each side books the co-signed receipts in its own ledger; nothing moves; the default), none (nothing is booked: a private swarm of one organisation) or evm (ERC-20 payment channels on an EVM chain: a renter signs a voucher with each telemetry beat it verifies, and a provider stops a job within a beat when they stop)"`
	EVM  EVMConfig `toml:"evm" comment:"the chain, contract and token of kind = \"evm\""`
}

// EVMConfig names the chain a node pays or is paid on.
type EVMConfig struct {
	RPCURL        string   `toml:"rpc_url" comment:"any Ethereum JSON-RPC endpoint: http(s):// or ws(s)://"`
	ChainID       uint64   `toml:"chain_id" comment:"the chain's ID, checked against the endpoint's at start (1337 for a development chain)"`
	Contract      string   `toml:"contract" comment:"address (0x…) of idlegrid's PaymentChannels contract on that chain"`
	Token         string   `toml:"token" comment:"address (0x…) of the ERC-20 token that pays"`
	UnitsPerMicro uint64   `toml:"units_per_micro" comment:"the token's base units per micro-unit of the currency: 1 for a 6-decimal token such as USDC, 10^12 for an 18-decimal one"`
	Deposit       float64  `toml:"deposit" comment:"renter: what a new channel to a provider is funded with, in the currency (USD); it pays many leases"`
	RedeemEvery   Duration `toml:"redeem_every" comment:"provider: how often the latest voucher of each channel is redeemed on chain (a transaction each); sooner when a channel nears its deposit or the renter starts to close it"`
	RedeemAt      int      `toml:"redeem_at_percent" comment:"provider: redeem a channel's latest voucher once it pays this share of the channel's deposit, so a renter's close cannot outrun it"`
}

// DefaultSettlement is the ledger, with the EVM section's defaults for
// when kind becomes evm.
func DefaultSettlement() SettlementConfig {
	return SettlementConfig{Kind: SettleLedger, EVM: EVMConfig{UnitsPerMicro: 1, Deposit: 10, RedeemEvery: Dur(24 * time.Hour), RedeemAt: 80}}
}

var hexAddress = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

func (c *Config) validateSettlement() error {
	s := c.Settlement
	if err := oneOf("settlement.kind", s.Kind, []string{SettleLedger, SettleNone, SettleEVM}); err != nil {
		return err
	}
	if s.Kind != SettleEVM {
		return nil
	}
	e := s.EVM
	if u, err := url.Parse(e.RPCURL); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return FieldErr("settlement.evm.rpc_url", e.RPCURL, "an http(s):// or ws(s):// JSON-RPC endpoint, such as http://127.0.0.1:8545")
	}
	if e.ChainID == 0 {
		return FieldErr("settlement.evm.chain_id", e.ChainID, "the chain's ID, such as 1337")
	}
	for _, a := range []struct{ name, v string }{{"settlement.evm.contract", e.Contract}, {"settlement.evm.token", e.Token}} {
		if !hexAddress.MatchString(a.v) {
			return FieldErr(a.name, a.v, "a 0x-prefixed 20-byte hex address")
		}
	}
	if e.UnitsPerMicro == 0 || e.UnitsPerMicro > 1e12 {
		return FieldErr("settlement.evm.units_per_micro", e.UnitsPerMicro, "1 to 10^12")
	}
	if e.Deposit <= 0 || e.Deposit > 1e9 {
		return FieldErr("settlement.evm.deposit", e.Deposit, "more than 0, at most 10^9")
	}
	if err := durRange("settlement.evm.redeem_every", e.RedeemEvery, time.Minute, 365*24*time.Hour); err != nil {
		return err
	}
	return intRange("settlement.evm.redeem_at_percent", e.RedeemAt, 1, 100)
}
