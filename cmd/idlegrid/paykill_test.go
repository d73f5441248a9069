package main

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/pay/evm"
)

// TestASIGKILLedRenterLeavesItsProviderAtMostABeatUnpaid rents from a
// provider daemon paid by channel, on a development chain, and SIGKILLs
// the `idlegrid rent` process once it has paid a few beats, three times.
// The provider stops each job at its next beat: of the beats its receipt
// counts, the latest voucher it took pays all but at most the last (its
// exposure, logged in money too). The next rent takes the same channel up
// where the killed one left it. Over TCP and over QUIC, each with a chain
// of its own.
func TestASIGKILLedRenterLeavesItsProviderAtMostABeatUnpaid(t *testing.T) {
	overTransports(t, aSIGKILLedRenterLeavesItsProviderAtMostABeatUnpaid)
}

func aSIGKILLedRenterLeavesItsProviderAtMostABeatUnpaid(t *testing.T, transport string) {
	chain, err := evm.StartDevChain()
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	image, bin := executortest.BusyboxImage(t), buildBinary(t)
	prov, _, pid, _ := restartableProvider(t, bin, executortest.Docker(t), transport, append(evmSettings(chain), [2]string{"jobs.heartbeat_interval", "1s"}, [2]string{"jobs.renter_grace", "30s"})...)
	renter := renterRepo(t, bin, "renter")
	evmRepo(t, chain, renter)
	pa := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", prov))
	ra := jsonOf[walletView](t, runCLI(t, "wallet", "--json", "--repo", renter))
	if err := chain.Fund(t.Context(), nil, common.HexToAddress(pa.Address)); err != nil {
		t.Fatal(err)
	}
	if err := chain.Fund(t.Context(), big.NewInt(100_000_000), common.HexToAddress(ra.Address)); err != nil {
		t.Fatal(err)
	}

	const rounds = 3
	var worst, worstBeats int64
	var channel string
	for round := range rounds {
		r := startRent(t, bin, renter, pid.Addrs[0], rental{image, "1", 1}, "sh", "-c", "echo up; sleep 300")
		r.round = round
		waitOutput(t, r, "up\n", 60*time.Second)
		// Three beats paid, then the renter dies without a word.
		paid := waitJSON(t, 30*time.Second, "the provider takes three vouchers", bin, func(ls []api.LeaseView) bool {
			l := live(ls)
			return l != nil && l.Voucher != nil && l.Beats >= 3
		}, "leases", "--json", "--repo", prov)
		lease := *live(paid)
		if err := r.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-r.done
		ended := waitJSON(t, 60*time.Second, "the provider ends the lease", bin, func(rs []api.ReceiptView) bool {
			return receiptOf(rs, lease.ID) != nil
		}, "receipts", "--json", "--repo", prov)
		rc := receiptOf(ended, lease.ID)
		held := waitJSON(t, 10*time.Second, "the lease's record", bin, func(ls []api.LeaseView) bool { return leaseOf(ls, lease.ID) != nil }, "leases", "--json", "--repo", prov)
		v := leaseOf(held, lease.ID).Voucher
		if rc.Voucher == nil || v == nil {
			t.Fatalf("round %d: the receipt names voucher %+v, the provider holds %+v", round, rc.Voucher, v)
		}
		if channel == "" {
			channel = v.Channel
		} else if v.Channel != channel {
			t.Errorf("round %d is paid by channel %s, the first by %s", round, v.Channel, channel)
		}
		// The receipt names the voucher of its last beat (nonce = base +
		// beats); the provider holds one for all but at most that beat.
		owed, _ := new(big.Int).SetString(rc.Voucher.Amount, 10)
		got, _ := new(big.Int).SetString(v.Amount, 10)
		exposure := new(big.Int).Sub(owed, got).Int64() // token units: one per micro
		unpaid := int64(rc.Voucher.Nonce) - int64(v.Nonce)
		if unpaid < 0 || unpaid > 1 || exposure < 0 {
			t.Errorf("round %d: the receipt names voucher %d for %s, the provider holds %d for %s; the lease ended with %q", round, rc.Voucher.Nonce, owed, v.Nonce, got, rc.Note)
		}
		worst, worstBeats = max(worst, exposure), max(worstBeats, unpaid)
		t.Logf("round %d: %s; exposure %d beat(s), %d micros of %s owed", round, rc.Note, unpaid, exposure, rc.Amount)
	}
	t.Logf("worst exposure in %d SIGKILLs: %d beat(s), %d micros", rounds, worstBeats, worst)

	// Asked, the provider's daemon redeems the channel's latest voucher:
	// the chain then says it paid what the provider holds.
	red := jsonOf[api.RedeemResult](t, runCLI(t, "channel", "redeem", "--json", "--repo", prov))
	if red.Redeemed != 1 || red.Wallet != pa.Address {
		t.Fatalf("channel redeem: %+v", red)
	}
	ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", prov)
	var latest *api.VoucherView
	for _, l := range ls {
		if v := l.Voucher; v != nil && (latest == nil || v.Nonce > latest.Nonce) {
			latest = v
		}
	}
	chs := jsonOf[[]channelView](t, runCLI(t, "channel", "list", "--json", "--repo", prov))
	if len(chs) != 1 || chs[0].ID != channel || latest == nil || chs[0].Nonce != latest.Nonce {
		t.Fatalf("channels %+v; the provider's latest voucher %+v", chs, latest)
	}
}

// live is the lease in ls that has not ended; nil with none.
func live(ls []api.LeaseView) *api.LeaseView {
	for i := range ls {
		if !ls[i].Ended {
			return &ls[i]
		}
	}
	return nil
}

func leaseOf(ls []api.LeaseView, id string) *api.LeaseView {
	for i := range ls {
		if ls[i].ID == id {
			return &ls[i]
		}
	}
	return nil
}

func receiptOf(rs []api.ReceiptView, id string) *api.ReceiptView {
	for i := range rs {
		if rs[i].LeaseID == id {
			return &rs[i]
		}
	}
	return nil
}
