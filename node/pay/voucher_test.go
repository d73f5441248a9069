package pay

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

var testDomain = NewDomain(big.NewInt(1337), common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"))

func TestAVoucherRecoversToItsSignerOnlyInItsDomain(t *testing.T) {
	key, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(key.PublicKey)
	v := Voucher{Channel: common.HexToHash("0xab"), Amount: big.NewInt(123456), Nonce: 3}
	sig, err := Sign(key, testDomain, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(testDomain, v, sig, addr); err != nil {
		t.Fatal(err)
	}
	other := []struct {
		name string
		d    Domain
		v    Voucher
	}{
		{"chain", Domain{ChainID: big.NewInt(1), Contract: testDomain.Contract}, v},
		{"contract", Domain{ChainID: testDomain.ChainID, Contract: common.HexToAddress("0x01")}, v},
		{"channel", testDomain, Voucher{Channel: common.HexToHash("0xac"), Amount: v.Amount, Nonce: v.Nonce}},
		{"amount", testDomain, Voucher{Channel: v.Channel, Amount: big.NewInt(123457), Nonce: v.Nonce}},
		{"nonce", testDomain, Voucher{Channel: v.Channel, Amount: v.Amount, Nonce: 4}},
	}
	for _, o := range other {
		if err := Verify(o.d, o.v, sig, addr); err == nil {
			t.Errorf("a voucher signed for one %s verifies for another", o.name)
		}
	}
}

func TestMalformedVouchersAreRefusedWithTheirField(t *testing.T) {
	key, _ := crypto.GenerateKey()
	good := Voucher{Channel: common.HexToHash("0xab"), Amount: big.NewInt(1), Nonce: 1}
	sig, _ := Sign(key, testDomain, good)
	big257 := new(big.Int).Lsh(big.NewInt(1), 256)
	cases := []struct {
		d    Domain
		v    Voucher
		sig  []byte
		want string
	}{
		{testDomain, Voucher{Channel: good.Channel, Amount: big.NewInt(-1), Nonce: 1}, sig, "voucher amount -1"},
		{testDomain, Voucher{Channel: good.Channel, Amount: big257, Nonce: 1}, sig, "voucher amount"},
		{testDomain, Voucher{Channel: good.Channel, Amount: nil, Nonce: 1}, sig, "voucher amount <nil>"},
		{testDomain, Voucher{Channel: good.Channel, Amount: big.NewInt(1), Nonce: 0}, sig, "voucher nonce 0"},
		{Domain{Contract: testDomain.Contract}, good, sig, "chain ID <nil>"},
		{testDomain, good, sig[:64], "64 bytes, want 65"},
		{testDomain, good, append(append([]byte{}, sig[:64]...), 2), "v = 2"},
	}
	for _, c := range cases {
		_, err := Signer(c.d, c.v, c.sig)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

// BenchmarkVoucherSignVerify signs and checks one voucher per op (what a
// renter and its provider do for each beat), beside a raw secp256k1 sign
// and public-key recovery of a 32-byte hash in the same run: the figure is
// voucher ops per second as a ratio of raw ones.
func BenchmarkVoucherSignVerify(b *testing.B) {
	key, _ := crypto.GenerateKey()
	addr := crypto.PubkeyToAddress(key.PublicKey)
	v := Voucher{Channel: common.HexToHash("0xab"), Amount: big.NewInt(1), Nonce: 1}
	h := crypto.Keccak256([]byte("a beat"))
	raw := func() {
		h[0]++ // a new hash each time, as each voucher is new
		sig, err := crypto.Sign(h, key)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := crypto.Ecrecover(h, sig); err != nil {
			b.Fatal(err)
		}
	}
	voucher := func() {
		v.Nonce++
		v.Amount.Add(v.Amount, big.NewInt(417))
		sig, err := Sign(key, testDomain, v)
		if err != nil {
			b.Fatal(err)
		}
		if err := Verify(testDomain, v, sig, addr); err != nil {
			b.Fatal(err)
		}
	}
	// In rounds of 100 of each, so that both see the same machine.
	var rawNs, voucherNs int64
	b.ResetTimer()
	for done := 0; done < b.N; done += 100 {
		n := min(100, b.N-done)
		t0 := nowNs()
		for range n {
			raw()
		}
		t1 := nowNs()
		for range n {
			voucher()
		}
		rawNs += t1 - t0
		voucherNs += nowNs() - t1
	}
	b.ReportMetric(float64(voucherNs)/float64(b.N)/1e3, "voucher-µs/op")
	b.ReportMetric(float64(rawNs)/float64(b.N)/1e3, "raw-µs/op")
	b.ReportMetric(float64(rawNs)/float64(voucherNs), "voucher/raw-rate")
}

func nowNs() int64 { return time.Now().UnixNano() }
