package pay

import (
	"bytes"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// meterLease is a lease of 2 GPUs at 1.8 per GPU-hour for an hour, paid
// by a channel whose last voucher (of an earlier lease) paid 5,000 at
// nonce 7; a token of 6 decimals.
func meterLease(t *testing.T) (*pb.Lease, Payer) {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	l := &pb.Lease{Id: "lease-1", StartUnixMs: 1_700_000_000_000, DurationSeconds: 3600, PriceMicros: 1_800_000, GpuCount: 2, Currency: "USD",
		Payment: &pb.LeasePayment{
			Settlement: &pb.Settlement{Kind: pb.SettlementKind_SETTLEMENT_EVM, ChainId: 1337, Contract: bytes.Repeat([]byte{0xc0}, 20), Token: bytes.Repeat([]byte{1}, 20), UnitsPerMicro: 1, Payee: bytes.Repeat([]byte{0xaa}, 20)},
			Channel:    bytes.Repeat([]byte{0xcc}, 32), Payer: crypto.PubkeyToAddress(key.PublicKey).Bytes(), Base: big.NewInt(5000).Bytes(), Nonce: 7,
		}}
	terms, err := TermsOf(l)
	if err != nil {
		t.Fatal(err)
	}
	return l, Payer{Terms: terms, Key: key}
}

func TestVouchersPayExactlyWhatTheReceiptWillSay(t *testing.T) {
	_, p := meterLease(t)
	// 1.8 × 2 GPUs = 3.6 per hour = 1,000 micros a second.
	for _, c := range []struct {
		metered time.Duration
		want    int64
	}{{0, 5000}, {999 * time.Millisecond, 5000}, {time.Second, 6000}, {10*time.Second + 500*time.Millisecond, 15000}, {2 * time.Hour, 5000 + 3_600_000}} {
		if got := p.Owed(c.metered); got.Int64() != c.want {
			t.Errorf("owed after %s: %s, want %d", c.metered, got, c.want)
		}
	}
	v, err := p.Voucher(3, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.Nonce != 10 || new(big.Int).SetBytes(v.Amount).Int64() != 15000 || v.MeteredMs != 10000 || v.LeaseId != "lease-1" {
		t.Fatalf("voucher %v", v)
	}
	// The same beat signs the same voucher: a restarted renter never
	// signs two amounts with one nonce.
	again, _ := p.Voucher(3, 10*time.Second)
	if !sameVoucher(v, again) {
		t.Fatal("the same beat's voucher differs when signed again")
	}
}

func TestATabTakesOnlyTheNextExactVoucher(t *testing.T) {
	l, p := meterLease(t)
	stranger, _ := crypto.GenerateKey()
	tab := &Tab{Terms: p.Terms, Deposit: big.NewInt(100_000)}
	sign := func(beats uint64, metered time.Duration) *pb.Voucher {
		v, err := p.Voucher(beats, metered)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	resign := func(v *pb.Voucher, key *ecdsa.PrivateKey, mutate func(*Voucher, *pb.Voucher)) *pb.Voucher {
		out := proto.Clone(v).(*pb.Voucher)
		ev := Voucher{Channel: p.Channel, Amount: new(big.Int).SetBytes(v.Amount), Nonce: v.Nonce}
		mutate(&ev, out)
		sig, err := Sign(key, p.Domain, ev)
		if err != nil {
			t.Fatal(err)
		}
		out.Channel, out.Amount, out.Nonce, out.Signature = ev.Channel.Bytes(), ev.Amount.Bytes(), ev.Nonce, sig
		return out
	}
	first := sign(1, 5*time.Second)
	if err := tab.Take(first, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	second := sign(2, 10*time.Second)
	otherLease := proto.Clone(l).(*pb.Lease)
	otherLease.Id = "lease-2"
	otherTerms := p.Terms
	otherTerms.Lease = otherLease
	cases := []struct {
		name string
		v    *pb.Voucher
		sent time.Duration
		want string
	}{
		{"a replay", first, 10 * time.Second, "nonce 8 is not past 8"},
		{"a beat not yet sent", second, 9 * time.Second, "the last beat sent is at 9s"},
		{"an underpayment", resign(second, p.Key, func(v *Voucher, _ *pb.Voucher) { v.Amount.Sub(v.Amount, big.NewInt(1)) }), 10 * time.Second, "amount 14999 for 10s metered; the lease owes 15000"},
		{"an overpayment", resign(second, p.Key, func(v *Voucher, _ *pb.Voucher) { v.Amount.Add(v.Amount, big.NewInt(1)) }), 10 * time.Second, "the lease owes 15000"},
		{"a decreasing amount", resign(second, p.Key, func(v *Voucher, w *pb.Voucher) { v.Amount.SetInt64(7000); w.MeteredMs = 2000 }), 10 * time.Second, "not past the last voucher's 5s"},
		{"a stranger's signature", resign(second, stranger, func(*Voucher, *pb.Voucher) {}), 10 * time.Second, "not the channel's renter"},
		{"an amount changed after signing", func() *pb.Voucher {
			v := proto.Clone(second).(*pb.Voucher)
			v.Amount = big.NewInt(99_999).Bytes()
			return v
		}(), 10 * time.Second, "not the channel's renter"},
		{"another channel's", resign(second, p.Key, func(v *Voucher, _ *pb.Voucher) { v.Channel[0] ^= 1 }), 10 * time.Second, "on channel"},
		{"another lease's", func() *pb.Voucher { v := proto.Clone(second).(*pb.Voucher); v.LeaseId = "lease-2"; return v }(), 10 * time.Second, `for lease "lease-2"`},
		{"a truncated signature", func() *pb.Voucher { v := proto.Clone(second).(*pb.Voucher); v.Signature = v.Signature[:64]; return v }(), 10 * time.Second, "malformed"},
		{"an oversized amount", func() *pb.Voucher { v := proto.Clone(second).(*pb.Voucher); v.Amount = make([]byte, 33); return v }(), 10 * time.Second, "malformed"},
		{"a huge metered time", resign(second, p.Key, func(_ *Voucher, w *pb.Voucher) { w.MeteredMs = 1 << 63 }), 10 * time.Second, "the last beat sent"},
	}
	for _, c := range cases {
		err := tab.Take(c.v, c.sent)
		if !errors.Is(err, ErrVoucher) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a refusal with %q", c.name, err, c.want)
		}
		if tab.Last != first {
			t.Fatalf("%s: the refused voucher replaced the last one taken", c.name)
		}
	}
	if err := tab.Take(second, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if tab.Paid() != 10*time.Second || tab.Amount().Int64() != 15000 {
		t.Fatalf("paid %s, amount %s", tab.Paid(), tab.Amount())
	}
	// The deposit covers 95 s of this lease past its base, not 96.
	if !tab.Covers(95*time.Second) || tab.Covers(96*time.Second) {
		t.Fatalf("cover of 100,000 (base 5,000, 1,000 a second): 95 s %v, 96 s %v", tab.Covers(95*time.Second), tab.Covers(96*time.Second))
	}
}

func TestTermsOfAMalformedPaymentNameTheField(t *testing.T) {
	l, _ := meterLease(t)
	for _, c := range []struct {
		mut  func(*pb.LeasePayment)
		want string
	}{
		{func(p *pb.LeasePayment) { p.Channel = p.Channel[:31] }, "payment.channel: 31 bytes"},
		{func(p *pb.LeasePayment) { p.Payer = nil }, "payment.payer: 0 bytes"},
		{func(p *pb.LeasePayment) { p.Settlement.Payee = nil }, "payment.settlement.payee"},
		{func(p *pb.LeasePayment) { p.Base = make([]byte, 33) }, "payment.base: 33 bytes"},
		{func(p *pb.LeasePayment) { p.Settlement.Kind = pb.SettlementKind_SETTLEMENT_LEDGER }, "not paid by a channel (settlement ledger)"},
	} {
		m := proto.Clone(l).(*pb.Lease)
		c.mut(m.Payment)
		if _, err := TermsOf(m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// sameVoucher says whether a and b are the same signed voucher.
func sameVoucher(a, b *pb.Voucher) bool {
	return bytes.Equal(a.GetSignature(), b.GetSignature()) && bytes.Equal(a.GetChannel(), b.GetChannel()) &&
		bytes.Equal(a.GetAmount(), b.GetAmount()) && a.GetNonce() == b.GetNonce()
}

// A voucher padded with a field this version does not know is refused
// where the job stream decodes it (p2p.ReadMsg decodes with
// market.Unmarshal), before any signature is checked.
func TestAVoucherWithUnknownFieldsIsRefusedOnTheWire(t *testing.T) {
	_, p := meterLease(t)
	v, err := p.Voucher(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	b, err := proto.Marshal(&pb.ReceiptReply{Voucher: v})
	if err != nil {
		t.Fatal(err)
	}
	if err := market.Unmarshal(b, new(pb.ReceiptReply)); err == nil || !strings.Contains(err.Error(), "voucher.Voucher") {
		t.Fatalf("a padded voucher: %v", err)
	}
}
