package pay

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/crypto/secp256k1"
)

// Domain is where a voucher pays: the chain and the channel contract. It
// is the EIP-712 domain of the contract ("idlegrid channels", version
// "1"), so a voucher signed for one chain or contract recovers to another
// signer on any other.
type Domain struct {
	ChainID  *big.Int
	Contract common.Address
	sep      common.Hash // the separator, once NewDomain computed it
}

// NewDomain is the domain of contract on chain, with its separator
// computed once for all the vouchers it signs and checks.
func NewDomain(chain *big.Int, contract common.Address) Domain {
	d := Domain{ChainID: chain, Contract: contract}
	d.sep = d.Separator()
	return d
}

// Voucher is a renter's promise on a channel: the channel has owed its
// provider Amount (in the token's base units) in all, as of Nonce. Each
// voucher of a channel carries a higher nonce and an amount no lower than
// the last; the provider redeems the latest.
type Voucher struct {
	Channel common.Hash
	Amount  *big.Int
	Nonce   uint64
}

// SignatureLen is a voucher signature's length: r, s and v (27 or 28), as
// the contract's ECDSA recovery takes it.
const SignatureLen = 65

var (
	domainType  = crypto.Keccak256Hash([]byte("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"))
	voucherType = crypto.Keccak256Hash([]byte("Voucher(bytes32 channel,uint256 amount,uint64 nonce)"))
	domainName  = crypto.Keccak256Hash([]byte("idlegrid channels"))
	domainVer   = crypto.Keccak256Hash([]byte("1"))
	secpHalfN   = new(big.Int).Rsh(secp256k1.S256().Params().N, 1)
	maxUint256  = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
)

// Separator is d's EIP-712 domain separator.
func (d Domain) Separator() common.Hash {
	if d.sep != (common.Hash{}) {
		return d.sep
	}
	var buf [5 * 32]byte
	copy(buf[0:], domainType[:])
	copy(buf[32:], domainName[:])
	copy(buf[64:], domainVer[:])
	d.ChainID.FillBytes(buf[96:128])
	copy(buf[128+12:], d.Contract[:])
	return crypto.Keccak256Hash(buf[:])
}

// Digest is what the renter signs for v in d: the contract's
// voucherDigest.
func (d Domain) Digest(v Voucher) common.Hash {
	var s [4 * 32]byte
	copy(s[0:], voucherType[:])
	copy(s[32:], v.Channel[:])
	v.Amount.FillBytes(s[64:96])
	new(big.Int).SetUint64(v.Nonce).FillBytes(s[96:128])
	var m [2 + 2*32]byte
	m[0], m[1] = 0x19, 0x01
	sep := d.Separator()
	copy(m[2:], sep[:])
	structHash := keccak(s[:])
	copy(m[34:], structHash[:])
	return keccak(m[:])
}

// Check says why v cannot be a voucher at all: an amount out of uint256,
// a zero nonce (the contract's first nonce is 1), a domain without a chain.
func (d Domain) Check(v Voucher) error {
	switch {
	case d.ChainID == nil || d.ChainID.Sign() <= 0 || d.ChainID.BitLen() > 256:
		return fmt.Errorf("voucher domain: chain ID %v: want a positive 256-bit number", d.ChainID)
	case v.Amount == nil || v.Amount.Sign() < 0 || v.Amount.Cmp(maxUint256) > 0:
		return fmt.Errorf("voucher amount %v: want 0 to 2^256-1", v.Amount)
	case v.Nonce == 0:
		return errors.New("voucher nonce 0: nonces start at 1")
	}
	return nil
}

// Sign signs v in d with the renter's wallet key.
func Sign(key *ecdsa.PrivateKey, d Domain, v Voucher) ([]byte, error) {
	if err := d.Check(v); err != nil {
		return nil, err
	}
	h := d.Digest(v)
	sig, err := crypto.Sign(h[:], key)
	if err != nil {
		return nil, err
	}
	sig[64] += 27
	return sig, nil
}

// Signer recovers the address that signed v in d, as the contract does:
// 65 bytes, v 27 or 28, s in the lower half of the curve order (so no
// second signature of the same voucher exists).
func Signer(d Domain, v Voucher, sig []byte) (common.Address, error) {
	if err := d.Check(v); err != nil {
		return common.Address{}, err
	}
	if len(sig) != SignatureLen {
		return common.Address{}, fmt.Errorf("voucher signature: %d bytes, want %d", len(sig), SignatureLen)
	}
	if sig[64] != 27 && sig[64] != 28 {
		return common.Address{}, fmt.Errorf("voucher signature: v = %d, want 27 or 28", sig[64])
	}
	if new(big.Int).SetBytes(sig[32:64]).Cmp(secpHalfN) > 0 {
		return common.Address{}, errors.New("voucher signature: s in the upper half of the curve order")
	}
	var rsv [SignatureLen]byte
	copy(rsv[:], sig)
	rsv[64] -= 27
	h := d.Digest(v)
	pub, err := crypto.Ecrecover(h[:], rsv[:])
	if err != nil {
		return common.Address{}, fmt.Errorf("voucher signature: %w", err)
	}
	a := keccak(pub[1:])
	return common.BytesToAddress(a[12:]), nil
}

// keccak is Keccak-256 with its state taken from a pool: a voucher is
// hashed three times on each side, once per beat.
func keccak(b []byte) (h common.Hash) {
	k := keccakPool.Get().(crypto.KeccakState)
	k.Reset()
	k.Write(b)
	k.Read(h[:])
	keccakPool.Put(k)
	return h
}

var keccakPool = sync.Pool{New: func() any { return crypto.NewKeccakState() }}

// Verify checks that sig is v in d signed by want.
func Verify(d Domain, v Voucher, sig []byte, want common.Address) error {
	got, err := Signer(d, v, sig)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("voucher signed by %s, not the channel's renter %s", got, want)
	}
	return nil
}
