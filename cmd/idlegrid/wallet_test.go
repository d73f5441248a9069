package main

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/node/pay/evm"
)

// evmRepo makes dir's settlement evm on d.
func evmRepo(t *testing.T, d *evm.DevChain, dir string) {
	t.Helper()
	for _, kv := range evmSettings(d) {
		setConfig(t, dir, kv[0], kv[1])
	}
}

// evmSettings are the settings of settlement evm on d.
func evmSettings(d *evm.DevChain) [][2]string {
	return [][2]string{{"settlement.evm.rpc_url", d.RPCURL}, {"settlement.evm.chain_id", strconv.FormatUint(d.ChainID, 10)},
		{"settlement.evm.contract", d.Contract.Hex()}, {"settlement.evm.token", d.Token.Hex()}, {"settlement.kind", "evm"}}
}

func jsonOf[T any](t *testing.T, r result) T {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	return v
}

func TestARenterOpensFundsListsAndClosesAChannelFromTheCLI(t *testing.T) {
	renter, provider := newRepo(t), newRepo(t)
	ra := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", renter))
	pa := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", provider))
	if ra.Kind != "ledger" || !common.IsHexAddress(ra.Address) || ra.Address == pa.Address {
		t.Fatalf("wallets %+v %+v", ra, pa)
	}
	if r := runCLI(t, "channel", "list", "--repo", renter); r.code == 0 || !strings.Contains(r.stderr, `settlement.kind is "ledger": channels need "evm"`) {
		t.Fatalf("channels on the ledger: %d %s", r.code, r.stderr)
	}
	d, err := evm.StartDevChain(common.HexToAddress(ra.Address), common.HexToAddress(pa.Address))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Mint(t.Context(), common.HexToAddress(ra.Address), big.NewInt(100_000_000)); err != nil {
		t.Fatal(err)
	}
	evmRepo(t, d, renter)
	evmRepo(t, d, provider)
	w := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", renter))
	if w.ChainID != 1337 || w.Token != "100000000" || w.TokenUSD != "100.00" {
		t.Fatalf("wallet %+v", w)
	}
	for _, bad := range [][]string{
		{"channel", "open", "0x12", "--amount", "5"},
		{"channel", "open", pa.Address, "--amount", "-5"},
		{"channel", "topup", "0x12", "--amount", "5"},
	} {
		if r := runCLI(t, append(bad, "--repo", renter)...); r.code != 2 {
			t.Fatalf("%v: exit %d (%s), want 2", bad, r.code, r.stderr)
		}
	}
	open := jsonOf[channelView](t, runCLI(t, "channel", "open", pa.Address, "--amount", "12.5", "--json", "--repo", renter))
	if open.Deposit != "12.50" || open.State != "open" || open.Role != "renter" {
		t.Fatalf("opened %+v", open)
	}
	if r := runCLI(t, "channel", "open", pa.Address, "--amount", "1", "--repo", renter); r.code == 0 || !strings.Contains(r.stderr, "ChannelExists") {
		t.Fatalf("a second channel to one provider: %d %s", r.code, r.stderr)
	}
	up := jsonOf[channelView](t, runCLI(t, "channel", "topup", open.ID, "--amount", "2.5", "--json", "--repo", renter))
	if up.Deposit != "15.00" {
		t.Fatalf("topped up %+v", up)
	}
	for _, repo := range []string{renter, provider} {
		list := jsonOf[[]channelView](t, runCLI(t, "channel", "list", "--json", "--repo", repo))
		if len(list) != 1 || list[0].ID != open.ID {
			t.Fatalf("list of %s: %+v", repo, list)
		}
	}
	if r := runCLI(t, "channel", "close", open.ID, "--repo", provider); r.code == 0 || !strings.Contains(r.stderr, "redeems the latest voucher it holds by itself, or now with `idlegrid channel redeem`") {
		t.Fatalf("a provider's CLI close: %d %s", r.code, r.stderr)
	}
	closing := jsonOf[channelView](t, runCLI(t, "channel", "close", open.ID, "--json", "--repo", renter))
	if closing.State != "closing" || closing.ClosesAt == "" {
		t.Fatalf("closing %+v", closing)
	}
	if r := runCLI(t, "channel", "close", open.ID, "--repo", renter); r.code == 0 || !strings.Contains(r.stderr, "challenge period ends at") {
		t.Fatalf("withdraw in the challenge period: %d %s", r.code, r.stderr)
	}
	if w := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", renter)); w.Token != "85000000" {
		t.Fatalf("renter's tokens while the channel holds 15: %s", w.Token)
	}
}
