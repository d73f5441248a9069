package node

import (
	"context"
	"encoding/hex"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/repo"
	"google.golang.org/protobuf/proto"
)

// paidBeat is the heartbeat of the tests' paid leases: the renter has
// one beat to send each voucher, on a machine that may be busy.
const paidBeat = time.Second

// paidSwarm is leaseSwarm with leases paid by channel: a development
// chain in process, the provider and the renter with settlement evm on
// it (their wallets funded with gas, the renter's with 100 of the test
// token), a heartbeat of paidBeat.
func paidSwarm(t *testing.T) (chain *evm.DevChain, prov, renter *Node) {
	t.Helper()
	keys := map[string]string{}
	var addrs []common.Address
	for _, name := range []string{"prov", "renter"} {
		k, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = hex.EncodeToString(crypto.FromECDSA(k))
		addrs = append(addrs, crypto.PubkeyToAddress(k.PublicKey))
	}
	chain, err := evm.StartDevChain(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { chain.Close() })
	if err := chain.Mint(context.Background(), addrs[1], big.NewInt(100_000_000)); err != nil {
		t.Fatal(err)
	}
	evmOn := func(c *config.Config) {
		c.Settlement.Kind = config.SettleEVM
		c.Settlement.EVM.RPCURL, c.Settlement.EVM.ChainID = chain.RPCURL, chain.ChainID
		c.Settlement.EVM.Contract, c.Settlement.EVM.Token = chain.Contract.Hex(), chain.Token.Hex()
	}
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	pr := testRepo(t, "prov", both(bootstrapFrom(boot), evmOn, func(c *config.Config) {
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh100"
		c.Provider.Price = "2.00"
		c.Provider.MinDuration = config.Dur(time.Minute)
		c.Jobs.HeartbeatInterval = config.Dur(paidBeat)
		c.Jobs.StopGrace = config.Dur(time.Second)
		c.Jobs.RenterGrace = config.Dur(30 * time.Second)
	}))
	rr := testRepo(t, "renter", both(bootstrapFrom(boot), evmOn))
	useWallet(t, pr, keys["prov"])
	useWallet(t, rr, keys["renter"])
	prov = startNode(t, pr, Options{GPUSource: fake})
	removeJobsOf(t, prov)
	renter = startNode(t, rr, Options{Light: true})
	return chain, prov, renter
}

// useWallet makes key (hex) the wallet of r.
func useWallet(t *testing.T, r *repo.Repo, key string) {
	t.Helper()
	if err := os.WriteFile(r.File(repo.WalletFile), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// storedVoucher is the voucher n keeps with lease id's record.
func storedVoucher(t *testing.T, n *Node, id string) *pb.Voucher {
	t.Helper()
	rec, err := records.Store{D: n.store}.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("lease %s: %v", id, err)
	}
	if len(rec.Voucher) == 0 {
		t.Fatalf("lease %s: no voucher kept on %s", id, short(n.id))
	}
	v := new(pb.Voucher)
	if err := proto.Unmarshal(rec.Voucher, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// paidOf reads the receipt n stored for lease id and the payment of its
// lease.
func paidOf(t *testing.T, n *Node, id string) (*pb.Receipt, *pb.LeasePayment) {
	t.Helper()
	rec, err := records.Store{D: n.store}.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := rec.Open()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](storedReceipt(t, n, id))
	if err != nil {
		t.Fatal(err)
	}
	return rc, l.GetPayment()
}

func TestALeasePaidByChannelPaysEachBeatAndTheProviderRedeems(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	chain, prov, renter := paidSwarm(t)
	ctx := context.Background()

	// The offer says how the provider is paid; the bid what the renter
	// pays with; the two fit.
	var ids []string
	var progress []string
	for range 2 {
		res, err := renter.Rent(ctx, rentRequest(image, "sh", "-c", "sleep 3; echo paid"), RentOutput{Progress: func(s string) { progress = append(progress, s) }})
		if err != nil {
			t.Fatalf("rent: %v\n%s", err, strings.Join(progress, "\n"))
		}
		if res.Receipt.Outcome != "completed" || len(res.Receipt.SignedBy) != 2 {
			t.Fatalf("receipt %+v", res.Receipt)
		}
		ids = append(ids, res.Lease.ID)
		waitFor(t, 10*time.Second, "the provider holds the countersigned receipt", func() bool {
			return len(storedReceipt(t, prov, res.Lease.ID).RenterSignature) > 0
		})
	}

	var channel []byte
	var last *pb.Voucher
	for i, id := range ids {
		rc, p := paidOf(t, prov, id)
		if p == nil || rc.Voucher == nil {
			t.Fatalf("lease %s: payment %v, receipt's voucher %v", id, p, rc.Voucher)
		}
		if i == 0 {
			channel = p.Channel
		}
		// One channel pays both: the second lease opens none, and begins
		// where the first one's final voucher left the channel.
		if string(p.Channel) != string(channel) {
			t.Errorf("lease %d is paid by channel %x, lease 0 by %x", i, p.Channel, channel)
		}
		if last != nil && (new(big.Int).SetBytes(p.Base).Cmp(new(big.Int).SetBytes(last.Amount)) != 0 || p.Nonce != last.Nonce) {
			t.Errorf("lease %d begins at %x nonce %d; the last voucher paid %x at nonce %d", i, p.Base, p.Nonce, last.Amount, last.Nonce)
		}
		// The receipt names the voucher that pays it; both sides hold it
		// signed, and it pays exactly the receipt's amount.
		pv, rv := storedVoucher(t, prov, id), storedVoucher(t, renter, id)
		if !proto.Equal(pv, rv) {
			t.Errorf("lease %s: the provider holds voucher %v, the renter %v", id, pv, rv)
		}
		named := proto.Clone(pv).(*pb.Voucher)
		named.Signature = nil
		if !proto.Equal(named, rc.Voucher) {
			t.Errorf("lease %s: the receipt names %v, the provider holds %v", id, rc.Voucher, named)
		}
		if paid := new(big.Int).Sub(new(big.Int).SetBytes(pv.Amount), new(big.Int).SetBytes(p.Base)); paid.Uint64() != rc.AmountMicros || rc.AmountMicros == 0 {
			t.Errorf("lease %s: the voucher pays %s beyond its base, the receipt says %d micros", id, paid, rc.AmountMicros)
		}
		if pv.Nonce != p.Nonce+rc.Beats {
			t.Errorf("lease %s: final nonce %d, want base nonce %d + %d beats", id, pv.Nonce, p.Nonce, rc.Beats)
		}
		last = pv
	}

	// Nothing was redeemed yet (the schedule is a day); on its schedule
	// the provider redeems the latest voucher, and is paid exactly it.
	ch := common.BytesToHash(channel)
	before, err := prov.wallet.Chain.Channel(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	if before.Paid.Sign() != 0 {
		t.Fatalf("paid %s before any redemption", before.Paid)
	}
	recs, err := prov.leaseStore().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := prov.wallet.RedeemDue(ctx, recs, true); n != 1 {
		t.Fatalf("redeemed %d channels, want 1", n)
	}
	after, err := prov.wallet.Chain.Channel(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	if after.Paid.Cmp(new(big.Int).SetBytes(last.Amount)) != 0 || after.Nonce != last.Nonce {
		t.Fatalf("channel paid %s at nonce %d; the last voucher pays %x at %d", after.Paid, after.Nonce, last.Amount, last.Nonce)
	}
	bal, err := prov.wallet.Chain.(*evm.Chain).BalancesOf(ctx, prov.wallet.Address())
	if err != nil {
		t.Fatal(err)
	}
	if bal.Token.Cmp(after.Paid) != 0 {
		t.Errorf("the provider holds %s of the token; the channel paid it %s", bal.Token, after.Paid)
	}
	// Redeemed once, a voucher is not due again.
	if n := prov.wallet.RedeemDue(ctx, recs, true); n != 0 {
		t.Errorf("redeemed %d channels again", n)
	}

	// A provider that claims a voucher it was never given (its own
	// signature, a larger amount) is refused by the contract; the
	// channel pays nothing more.
	forged := pay.Voucher{Channel: ch, Amount: new(big.Int).Add(new(big.Int).SetBytes(last.Amount), big.NewInt(1_000_000)), Nonce: last.Nonce + 1}
	sig, err := pay.Sign(prov.wallet.Key, pay.NewDomain(new(big.Int).SetUint64(chain.ChainID), chain.Contract), forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.wallet.Chain.Redeem(ctx, forged, sig); err == nil || !strings.Contains(err.Error(), "BadSignature") {
		t.Fatalf("a voucher the provider signed itself: %v, want BadSignature", err)
	}
	if again, _ := prov.wallet.Chain.Channel(ctx, ch); again.Paid.Cmp(after.Paid) != 0 {
		t.Errorf("paid %s after the forged claim, %s before", again.Paid, after.Paid)
	}
}

func TestAProviderStopsAJobWithinABeatOfTheLastVoucher(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	_, prov, renter := paidSwarm(t)
	ctx := context.Background()
	done := rentAsync(ctx, renter, rentRequest(image, "sleep", "600"), RentOutput{})
	lv := activeLease(t, prov)
	// A few beats paid, then the renter's node is gone: no voucher comes.
	waitFor(t, 30*time.Second, "the renter pays a voucher", func() bool {
		rec, err := records.Store{D: prov.store}.Get(ctx, lv.ID)
		return err == nil && len(rec.Voucher) > 0 && rec.Beats >= 3
	})
	renter.Close()
	<-done
	waitFor(t, 60*time.Second, "the provider ends the lease", func() bool {
		rec, err := records.Store{D: prov.store}.Get(ctx, lv.ID)
		return err == nil && records.Ended(rec.State)
	})
	rc, p := paidOf(t, prov, lv.ID)
	if !strings.HasPrefix(rc.Note, "unpaid:") {
		t.Errorf("the lease ended with %q, want it stopped unpaid", rc.Note)
	}
	// The provider's exposure: what the receipt says the renter owes past
	// what its last voucher pays, at most one beat's worth (the price of
	// a beat's interval, rounded up to the second as metering does).
	v := storedVoucher(t, prov, lv.ID)
	paid := new(big.Int).Sub(new(big.Int).SetBytes(v.Amount), new(big.Int).SetBytes(p.Base)).Uint64()
	l, _, _ := mustRecord(t, prov, lv.ID).Open()
	perSecond := float64(l.PriceMicros) * float64(l.GpuCount) / 3600
	beat := uint64(perSecond*(paidBeat.Seconds()+1)) + 1
	if rc.AmountMicros < paid || rc.AmountMicros-paid > beat {
		t.Errorf("exposure %d micros (receipt %d, paid %d); one beat is %d", rc.AmountMicros-paid, rc.AmountMicros, paid, beat)
	}
	t.Logf("exposure %d micros of %d owed; one beat %d", rc.AmountMicros-paid, rc.AmountMicros, beat)
}

// mustRecord is n's record of lease id.
func mustRecord(t *testing.T, n *Node, id string) *records.Lease {
	t.Helper()
	rec, err := records.Store{D: n.store}.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
