package node

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
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
	"github.com/idlegrid/idlegrid/node/lease"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/pay/evm"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/p2p"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
)

// paidBeat is the heartbeat of the tests' paid leases: the renter has
// one beat to send each voucher, on a machine that may be busy.
const paidBeat = time.Second

// paidSwarm is leaseSwarm with leases paid by channel: a development
// chain in process, the provider and the renter with settlement evm on
// it (their wallets funded with gas, the renter's with 100 of the test
// token), a heartbeat of paidBeat; the provider listens on transport
// alone ("tcp" or "quic-v1"), so the job stream runs over it.
func paidSwarm(t *testing.T, transport string) (chain *evm.DevChain, prov, renter *Node) {
	t.Helper()
	p := newPaidSwarm(t, transport, nil)
	return p.chain, p.prov, p.renter
}

// overTransports runs test over TCP and over QUIC.
func overTransports(t *testing.T, test func(t *testing.T, transport string)) {
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			test(t, transport)
		})
	}
}

// connectedOver fails the test unless every connection between a and b
// runs over transport, and there is one.
func connectedOver(t *testing.T, a, b *Node, transport string) {
	t.Helper()
	conns := a.host.Network().ConnsToPeer(b.id)
	if len(conns) == 0 {
		t.Fatalf("%s is not connected to %s", short(a.id), short(b.id))
	}
	for _, c := range conns {
		if _, err := c.RemoteMultiaddr().ValueForProtocol(ma.ProtocolWithName(transport).Code); err != nil {
			t.Fatalf("%s reaches %s over %s, not %s", short(a.id), short(b.id), c.RemoteMultiaddr(), transport)
		}
	}
}

// listenOn is a loopback address on a free port of transport.
func listenOn(t *testing.T, transport string) string {
	t.Helper()
	if transport == "tcp" {
		return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", freePort(t))
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return fmt.Sprintf("/ip4/127.0.0.1/udp/%d/%s", c.LocalAddr().(*net.UDPAddr).Port, transport)
}

// paid is a paidSwarm, with what restarts its provider.
type paid struct {
	chain        *evm.DevChain
	prov, renter *Node
	provRepo     *repo.Repo
	provOptions  Options
}

// newPaidSwarm starts a paidSwarm, the renter's config edited by
// renterEdit (nil: none).
func newPaidSwarm(t *testing.T, transport string, renterEdit func(*config.Config)) *paid {
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
	listen := listenOn(t, transport)
	pr := testRepo(t, "prov", both(bootstrapFrom(boot), evmOn, func(c *config.Config) {
		c.Network.Listen = []string{listen}
		c.Provider.Enabled = true
		c.Provider.GPUSource = "fake:dgxh100"
		c.Provider.Price = "2.00"
		c.Provider.MinDuration = config.Dur(time.Minute)
		c.Jobs.HeartbeatInterval = config.Dur(paidBeat)
		c.Jobs.StopGrace = config.Dur(time.Second)
		c.Jobs.RenterGrace = config.Dur(30 * time.Second)
	}))
	rr := testRepo(t, "renter", both(bootstrapFrom(boot), evmOn, func(c *config.Config) {
		if renterEdit != nil {
			renterEdit(c)
		}
	}))
	useWallet(t, pr, keys["prov"])
	useWallet(t, rr, keys["renter"])
	p := &paid{chain: chain, provRepo: pr, provOptions: Options{GPUSource: fake}}
	p.prov = startNode(t, pr, p.provOptions)
	removeJobsOf(t, p.prov)
	p.renter = startNode(t, rr, Options{Light: true})
	return p
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
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		chain, prov, renter := paidSwarm(t, transport)
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
			connectedOver(t, renter, prov, transport)
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
	})
}

func TestAProviderStopsAJobWithinABeatOfTheLastVoucher(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		_, prov, renter := paidSwarm(t, transport)
		ctx := context.Background()
		done := rentAsync(ctx, renter, rentRequest(image, "sleep", "600"), RentOutput{})
		lv := activeLease(t, prov)
		connectedOver(t, renter, prov, transport)
		// A few beats paid, then the renter's node is gone: no voucher comes.
		waitFor(t, 30*time.Second, "the renter pays a voucher", func() bool {
			rec, err := records.Store{D: prov.store}.Get(ctx, lv.ID)
			return err == nil && len(rec.Voucher) > 0 && rec.Beats >= 3
		})
		renter.Close()
		rentEnded(t, done)
		waitFor(t, 60*time.Second, "the provider ends the lease", func() bool {
			rec, err := records.Store{D: prov.store}.Get(ctx, lv.ID)
			return err == nil && records.Ended(rec.State)
		})
		rc, p := paidOf(t, prov, lv.ID)
		if !strings.HasPrefix(rc.Note, "unpaid:") {
			t.Errorf("the lease ended with %q, want it stopped unpaid", rc.Note)
		}
		assertExposure(t, rc, p, storedVoucher(t, prov, lv.ID))
	})
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

// TestAProviderRefusesForgedVouchersOnTheJobStream is a renter that
// speaks the job stream itself: it pays each beat honestly, and between
// its payments sends the vouchers a cheating renter would. Each is
// refused, none is kept, and the eighth refused stops the job.
func TestAProviderRefusesForgedVouchersOnTheJobStream(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		executortest.BusyboxImage(t)
		_, prov, renter := paidSwarm(t, transport)
		ctx := context.Background()
		waitFor(t, 30*time.Second, "the provider's offer in the renter's book", func() bool {
			_, ok := renter.market.Snapshot().Offer(prov.id, offer.ProviderOfferID)
			return ok
		})
		o, _ := renter.market.Snapshot().Offer(prov.id, offer.ProviderOfferID)
		payment, err := renter.wallet.Payment(ctx, market.Accepted(o, renter.wallet.Pays()), func(common.Hash) *pb.Voucher { return nil })
		if err != nil {
			t.Fatal(err)
		}
		cs := signedLease(t, renter, prov, func(l *pb.Lease) {
			l.Bid.Settlement, l.Payment = renter.wallet.Pays(), payment
			l.Workload.Command = []string{"sleep", "600"}
		})
		if reply := proposeCS(t, renter, prov, cs); reply.Lease == nil {
			t.Fatalf("paid lease refused: %v", market.RejectOf(reply))
		}
		l := new(pb.Lease)
		if err := proto.Unmarshal(cs.Body, l); err != nil {
			t.Fatal(err)
		}
		terms, err := pay.TermsOf(l)
		if err != nil {
			t.Fatal(err)
		}
		honest := pay.Payer{Terms: terms, Key: renter.wallet.Key}
		s, err := renter.link.AttachJob(ctx, prov.id, &pb.JobAttach{LeaseId: l.Id})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Reset()
		if _, err := s.Conn().RemoteMultiaddr().ValueForProtocol(ma.ProtocolWithName(transport).Code); err != nil {
			t.Fatalf("the job stream runs over %s, not %s", s.Conn().RemoteMultiaddr(), transport)
		}
		type beat struct {
			n       uint64
			metered time.Duration
		}
		beats := make(chan beat, 256)
		go func() {
			f := attest.NewFollower(prov.id, renter.swarm.Tag(), l.Id, attest.Term{Start: time.UnixMilli(l.StartUnixMs), End: market.LeaseEnd(l), Now: time.Now, Skew: 30 * time.Second})
			for {
				fr := new(pb.JobFrame)
				if err := p2p.ReadMsg(s, p2p.MaxJobFrame, fr); err != nil {
					close(beats)
					return
				}
				if hb := fr.GetHeartbeat(); hb != nil && f.Add(hb) == nil {
					beats <- beat{f.Beats(), pay.Metered(l, f.Last())}
				}
			}
		}()
		next := func() beat { // the newest beat, waiting for one to come
			b, ok := <-beats
			for more := true; more && ok; {
				select {
				case nb, open := <-beats:
					if !open {
						more = false
						break
					}
					b = nb
				default:
					more = false
				}
			}
			if !ok {
				t.Fatal("the job stream ended")
			}
			return b
		}
		count := func(result string) float64 { return testutil.ToFloat64(prov.metrics.Vouchers.WithLabelValues(result)) }
		send := func(v *pb.Voucher) {
			if err := p2p.WriteMsg(s, &pb.ReceiptReply{Voucher: v}); err != nil {
				t.Fatal(err)
			}
		}
		var paid []*pb.Voucher
		payHonestly := func(b beat) {
			v, err := honest.Voucher(b.n, b.metered)
			if err != nil {
				t.Fatal(err)
			}
			want := count(metrics.VoucherTaken) + 1
			send(v)
			waitFor(t, 10*time.Second, "the provider takes the honest voucher", func() bool { return count(metrics.VoucherTaken) == want })
			paid = append(paid, v)
		}
		signed := func(p pay.Payer, b beat, edit func(*pay.Voucher, *pb.Voucher)) *pb.Voucher {
			wv := p.Named(b.n, b.metered)
			v := pay.Voucher{Channel: common.BytesToHash(wv.Channel), Amount: new(big.Int).SetBytes(wv.Amount), Nonce: wv.Nonce}
			if edit != nil {
				edit(&v, wv)
			}
			sig, err := pay.Sign(p.Key, p.Domain, v)
			if err != nil {
				t.Fatal(err)
			}
			wv.Channel, wv.Amount, wv.Nonce, wv.Signature = v.Channel.Bytes(), v.Amount.Bytes(), v.Nonce, sig
			return wv
		}
		other, _ := crypto.GenerateKey()
		withKey := honest
		withKey.Key = other
		otherChain, otherContract := honest, honest
		otherChain.Domain = pay.NewDomain(big.NewInt(1), honest.Domain.Contract)
		otherContract.Domain = pay.NewDomain(honest.Domain.ChainID, common.HexToAddress("0x00000000000000000000000000000000000000c0"))
		hostile := []struct {
			what string
			make func(beat) *pb.Voucher
		}{
			{"signed by another key", func(b beat) *pb.Voucher { return signed(withKey, b, nil) }},
			{"for another lease", func(b beat) *pb.Voucher {
				v := signed(honest, b, nil)
				v.LeaseId = "lease-other"
				return v
			}},
			{"on another channel", func(b beat) *pb.Voucher {
				return signed(honest, b, func(v *pay.Voucher, _ *pb.Voucher) { v.Channel = common.HexToHash("0xcc") })
			}},
			{"for another chain", func(b beat) *pb.Voucher { return signed(otherChain, b, nil) }},
			{"for another contract", func(b beat) *pb.Voucher { return signed(otherContract, b, nil) }},
			{"a decreasing amount", func(b beat) *pb.Voucher {
				return signed(honest, b, func(v *pay.Voucher, _ *pb.Voucher) {
					v.Amount = new(big.Int).Sub(new(big.Int).SetBytes(paid[len(paid)-1].Amount), big.NewInt(1))
				})
			}},
			{"an overpayment", func(b beat) *pb.Voucher {
				return signed(honest, b, func(v *pay.Voucher, _ *pb.Voucher) { v.Amount.Add(v.Amount, big.NewInt(1_000_000)) })
			}},
			{"a replay of the first voucher", func(beat) *pb.Voucher { return paid[0] }},
		}
		if lease.MaxRefusedVouchers != len(hostile) {
			t.Fatalf("the test sends %d hostile vouchers; the provider stops at %d", len(hostile), lease.MaxRefusedVouchers)
		}
		payHonestly(next())
		// Two hostile vouchers a beat, then the beat paid: the renter never
		// falls a beat behind, whatever the machine's load.
		for i := 0; i < len(hostile); {
			b := next()
			for k := 0; k < 2 && i < len(hostile); k, i = k+1, i+1 {
				want := count(metrics.VoucherRefused) + 1
				send(hostile[i].make(b))
				waitFor(t, 10*time.Second, "the provider refuses a voucher "+hostile[i].what, func() bool { return count(metrics.VoucherRefused) == want })
				if kept := storedVoucher(t, prov, l.Id); !proto.Equal(kept, paid[len(paid)-1]) {
					t.Fatalf("after a voucher %s the provider keeps %v, not the last honest one", hostile[i].what, kept)
				}
			}
			if i < len(hostile) {
				payHonestly(b)
			}
		}
		waitFor(t, 30*time.Second, "the provider ends the lease", func() bool { return records.Ended(mustRecord(t, prov, l.Id).State) })
		rc, p := paidOf(t, prov, l.Id)
		if !strings.Contains(rc.Note, "8 vouchers this provider refused") {
			t.Errorf("the lease ended with %q", rc.Note)
		}
		if kept := storedVoucher(t, prov, l.Id); !proto.Equal(kept, paid[len(paid)-1]) {
			t.Errorf("the provider keeps %v, not the last honest voucher", kept)
		}
		assertExposure(t, rc, p, paid[len(paid)-1])
	})
}

// TestAPaidLeaseKeepsItsVouchersAcrossAProviderRestart restarts the
// provider under a paid lease: the voucher it held is in the lease's
// record as it was, the adopted run takes the renter's vouchers again,
// and the receipt and the chain end with the latest one.
func TestAPaidLeaseKeepsItsVouchersAcrossAProviderRestart(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		p := newPaidSwarm(t, transport, nil)
		ctx := context.Background()
		done := rentAsync(ctx, p.renter, rentRequest(image, "sleep", "600"), RentOutput{})
		id := activeLease(t, p.prov).ID
		waitFor(t, 30*time.Second, "the provider takes two vouchers", func() bool {
			rec, err := records.Store{D: p.prov.store}.Get(ctx, id)
			return err == nil && len(rec.Voucher) > 0 && rec.Beats >= 2
		})
		// What the provider held just before it stopped is there after the
		// restart (or a later one it took in between), none lost.
		before := storedVoucher(t, p.prov, id)
		p.prov.Close()
		p.prov = startNode(t, p.provRepo, p.provOptions)
		if after := storedVoucher(t, p.prov, id); after.Nonce < before.Nonce || after.Nonce == before.Nonce && !proto.Equal(before, after) {
			t.Fatalf("the voucher kept before the restart %v, after it %v", before, after)
		}
		// The renter attaches again and pays on: a later voucher is taken.
		waitFor(t, 60*time.Second, "the restarted provider takes a later voucher", func() bool {
			rec, err := records.Store{D: p.prov.store}.Get(ctx, id)
			if err != nil || len(rec.Voucher) == 0 {
				return false
			}
			v := new(pb.Voucher)
			return proto.Unmarshal(rec.Voucher, v) == nil && v.Nonce > before.Nonce+1
		})
		if _, err := p.renter.CancelLease(ctx, id); err != nil {
			t.Fatal(err)
		}
		if res := rentEnded(t, done); res.err != nil {
			t.Fatalf("rent: %v", res.err)
		}
		waitFor(t, 10*time.Second, "the provider holds the countersigned receipt", func() bool {
			return len(storedReceipt(t, p.prov, id).RenterSignature) > 0
		})
		rc, pp := paidOf(t, p.prov, id)
		v := storedVoucher(t, p.prov, id)
		if rc.Voucher == nil || rc.Voucher.Nonce != v.Nonce || string(rc.Voucher.Amount) != string(v.Amount) {
			t.Fatalf("the receipt names %v, the provider holds %v", rc.Voucher, v)
		}
		if got := new(big.Int).Sub(new(big.Int).SetBytes(v.Amount), new(big.Int).SetBytes(pp.Base)).Uint64(); got != rc.AmountMicros {
			t.Errorf("the last voucher pays %d, the receipt says %d", got, rc.AmountMicros)
		}
		if res, err := p.prov.Redeem(ctx); err != nil || res.Redeemed != 1 {
			t.Fatalf("redeem: %+v, %v", res, err)
		}
		ch, err := p.prov.wallet.Chain.Channel(ctx, common.BytesToHash(v.Channel))
		if err != nil || ch.Nonce != v.Nonce {
			t.Fatalf("channel at nonce %d (%v), the last voucher's is %d", ch.Nonce, err, v.Nonce)
		}
	})
}

// TestAProviderStopsAJobItsChannelCannotPayFor rents on a channel of
// 0.011 (ten seconds of 2 GPUs at 2.00 an hour; the metered time runs
// from the lease's start, and on a loaded machine the container alone
// may take a few seconds to start, so a smaller deposit can end the
// lease before its first beat): the provider stops the job before a
// beat the deposit cannot cover, so the renter owes no more than the
// channel holds and its vouchers paid for all of it.
func TestAProviderStopsAJobItsChannelCannotPayFor(t *testing.T) {
	t.Parallel()
	overTransports(t, func(t *testing.T, transport string) {
		image := executortest.BusyboxImage(t)
		p := newPaidSwarm(t, transport, func(c *config.Config) { c.Settlement.EVM.Deposit = 0.011 })
		ctx := context.Background()
		res, err := p.renter.Rent(ctx, rentRequest(image, "sleep", "600"), RentOutput{})
		if err != nil {
			t.Fatalf("rent: %v", err)
		}
		id := res.Lease.ID
		rc, pp := paidOf(t, p.prov, id)
		if !strings.Contains(rc.Note, "does not cover the next beat") {
			t.Errorf("the lease ended with %q, want it stopped for its deposit", rc.Note)
		}
		ch, err := p.prov.wallet.Chain.Channel(ctx, common.BytesToHash(pp.Channel))
		if err != nil {
			t.Fatal(err)
		}
		owed := new(big.Int).Add(new(big.Int).SetBytes(pp.Base), new(big.Int).SetUint64(rc.AmountMicros))
		if owed.Cmp(ch.Deposit) > 0 || rc.AmountMicros == 0 {
			t.Errorf("the receipt owes %s in all; the channel holds %s", owed, ch.Deposit)
		}
		waitFor(t, 10*time.Second, "the provider holds the countersigned receipt", func() bool {
			return len(storedReceipt(t, p.prov, id).RenterSignature) > 0
		})
		if v := storedVoucher(t, p.prov, id); new(big.Int).SetBytes(v.Amount).Cmp(owed) != 0 {
			t.Errorf("the last voucher pays %x, the receipt owes %s", v.Amount, owed)
		}
	})
}

// assertExposure asserts the provider's exposure on a lease that ended
// unpaid: of the beats its receipt counts, the last voucher it holds (v)
// pays all but at most the last one, and never more than the receipt
// owes. One beat's worth of money depends on how far apart the last two
// beats were, which a busy machine stretches; the count does not.
func assertExposure(t *testing.T, rc *pb.Receipt, p *pb.LeasePayment, v *pb.Voucher) {
	t.Helper()
	paid := new(big.Int).Sub(new(big.Int).SetBytes(v.Amount), new(big.Int).SetBytes(p.Base)).Uint64()
	unpaid := int64(p.Nonce+rc.Beats) - int64(v.Nonce)
	if unpaid < 0 || unpaid > 1 || paid > rc.AmountMicros {
		t.Errorf("the receipt counts %d beats for %d micros; the last voucher pays %d beats (nonce %d from %d) for %d micros: want all but at most the last", rc.Beats, rc.AmountMicros, v.Nonce-p.Nonce, v.Nonce, p.Nonce, paid)
	}
	t.Logf("exposure: %d beat(s), %d micros of %d owed", unpaid, rc.AmountMicros-paid, rc.AmountMicros)
}
