package pay

import (
	"bytes"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
)

// Bounds of a voucher on the wire, a lease's payment's (market's):
// anything larger is refused before its signature is checked.
const (
	MaxAmountBytes = market.MaxAmountLen
	ChannelLen     = market.ChannelIDLen
	AddressLen     = market.AddressLen
)

// Terms are what a lease's vouchers must be: its co-signed payment, held
// to the lease's price and metering. Both sides build them from the same
// co-signed lease, so the renter's vouchers and the provider's checks
// compute one amount for each beat.
type Terms struct {
	Lease   *pb.Lease // the lease, extended where an extension set its term
	Domain  Domain
	Channel common.Hash
	Payer   common.Address
	Payee   common.Address
	Base    *big.Int // the channel's amount before this lease
	Nonce   uint64   // the channel's nonce before this lease
	Units   uint64   // token base units per micro-unit
}

// TermsOf reads the payment of a lease paid by a channel; an error names
// the field that is wrong.
func TermsOf(l *pb.Lease) (Terms, error) {
	p := l.GetPayment()
	s := p.GetSettlement()
	if s.GetKind() != pb.SettlementKind_SETTLEMENT_EVM {
		return Terms{}, fmt.Errorf("lease %s is not paid by a channel (settlement %s)", l.GetId(), market.SettlementName(s.GetKind()))
	}
	if err := market.CheckPayment(p); err != nil {
		return Terms{}, err
	}
	return Terms{
		Lease:   l,
		Domain:  NewDomain(new(big.Int).SetUint64(s.GetChainId()), common.BytesToAddress(s.GetContract())),
		Channel: common.BytesToHash(p.GetChannel()),
		Payer:   common.BytesToAddress(p.GetPayer()),
		Payee:   common.BytesToAddress(s.GetPayee()),
		Base:    new(big.Int).SetBytes(p.GetBase()),
		Nonce:   p.GetNonce(),
		Units:   s.GetUnitsPerMicro(),
	}, nil
}

// Owed is what the channel owes in all once the lease has run metered
// (from its start to a verified beat): the base plus what the receipt
// would say for that beat (market.Meter: whole seconds within the term,
// the price rounded up to the micro-unit), in token units.
func (t Terms) Owed(metered time.Duration) *big.Int {
	_, micros := market.Meter(t.Lease, time.UnixMilli(t.Lease.GetStartUnixMs()).Add(metered))
	owed := new(big.Int).SetUint64(micros)
	owed.Mul(owed, new(big.Int).SetUint64(t.Units))
	return owed.Add(owed, t.Base)
}

// Payer signs a lease's vouchers, one per verified beat: the k-th
// verified beat's voucher has nonce Terms.Nonce+k and pays Owed of that
// beat, so a renter that restarts and verifies the same beat again signs
// the same voucher, never a second one with the same nonce.
type Payer struct {
	Terms
	Key *ecdsa.PrivateKey
}

// Voucher is the signed voucher for the beats-th verified beat, metered
// from the lease's start.
func (p Payer) Voucher(beats uint64, metered time.Duration) (*pb.Voucher, error) {
	v := p.Named(beats, metered)
	sig, err := Sign(p.Key, p.Domain, Voucher{Channel: p.Channel, Amount: new(big.Int).SetBytes(v.Amount), Nonce: v.Nonce})
	if err != nil {
		return nil, err
	}
	v.Signature = sig
	return v, nil
}

// Named is the voucher that pays the beats-th beat of the lease, metered
// from its start, without its signature: what a receipt names, which
// both sides compute alike from the co-signed lease and the beats they
// agree on.
func (t Terms) Named(beats uint64, metered time.Duration) *pb.Voucher {
	metered = max(metered, 0).Truncate(time.Millisecond)
	return &pb.Voucher{Channel: t.Channel.Bytes(), Amount: t.Owed(metered).Bytes(), Nonce: t.Nonce + beats,
		LeaseId: t.Lease.GetId(), MeteredMs: uint64(metered.Milliseconds())}
}

// Metered is the lease's metered time at a beat taken at beat (ms from
// the lease's start; 0 before it or with no beat).
func Metered(l *pb.Lease, beat time.Time) time.Duration {
	if beat.IsZero() {
		return 0
	}
	return max(time.Duration(beat.UnixMilli()-l.GetStartUnixMs())*time.Millisecond, 0)
}

// Tab is the provider's side of a lease's vouchers: the last one it took
// and what the channel holds.
type Tab struct {
	Terms
	// Deposit is what the channel was funded with, as last read from the
	// chain; nil: not known (no cover check).
	Deposit *big.Int
	// Last is the latest voucher taken (nil: none yet).
	Last *pb.Voucher
}

// ErrVoucher wraps every reason a voucher is refused.
var ErrVoucher = errors.New("voucher refused")

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrVoucher, fmt.Sprintf(format, a...))
}

// Take checks v against the lease and, if it is the next voucher, keeps
// it. sent is the metered time of the latest beat the provider sent: a
// voucher may not claim to pay for a beat it was never given. The
// signature is checked before anything else of v is believed; then its
// lease, channel, nonce and amount, which must be exactly Owed for its
// metered time: no less (underpaying) and no more (an overpayment the
// renter never agreed to, which a provider could not claim either).
func (t *Tab) Take(v *pb.Voucher, sent time.Duration) error {
	if len(v.GetChannel()) != ChannelLen || len(v.GetAmount()) > MaxAmountBytes || len(v.GetSignature()) != SignatureLen || len(v.GetLeaseId()) > 128 {
		return refuse("malformed: channel %d bytes, amount %d bytes, signature %d bytes, lease ID %d bytes", len(v.GetChannel()), len(v.GetAmount()), len(v.GetSignature()), len(v.GetLeaseId()))
	}
	ev := Voucher{Channel: common.BytesToHash(v.GetChannel()), Amount: new(big.Int).SetBytes(v.GetAmount()), Nonce: v.GetNonce()}
	if err := Verify(t.Domain, ev, v.GetSignature(), t.Payer); err != nil {
		return refuse("%v", err)
	}
	metered := time.Duration(min(v.GetMeteredMs(), 1<<62/uint64(time.Millisecond))) * time.Millisecond
	switch {
	case v.GetLeaseId() != t.Lease.GetId():
		return refuse("for lease %q, not %s", v.GetLeaseId(), t.Lease.GetId())
	case ev.Channel != t.Channel:
		return refuse("on channel %s, not the lease's %s", ev.Channel, t.Channel)
	case ev.Nonce <= t.lastNonce():
		return refuse("nonce %d is not past %d", ev.Nonce, t.lastNonce())
	case metered > sent:
		return refuse("pays for %s metered; the last beat sent is at %s", metered, sent)
	case t.Last != nil && metered <= t.Paid():
		// Each voucher pays a later beat than the last: a renter cannot
		// make the provider verify and store vouchers faster than beats.
		return refuse("pays for %s metered, not past the last voucher's %s", metered, t.Paid())
	}
	if want := t.Owed(metered); ev.Amount.Cmp(want) != 0 {
		return refuse("amount %s for %s metered; the lease owes %s", ev.Amount, metered, want)
	}
	t.Last = v
	return nil
}

func (t *Tab) lastNonce() uint64 {
	if t.Last == nil {
		return t.Nonce
	}
	return t.Last.GetNonce()
}

// Paid is the metered time the last voucher taken pays for (0 with
// none).
func (t *Tab) Paid() time.Duration {
	return time.Duration(min(t.Last.GetMeteredMs(), 1<<62/uint64(time.Millisecond))) * time.Millisecond
}

// Same says whether v is the last voucher taken, sent again (a renter
// that re-attached or restarted signs the same voucher for the same
// beat): not refused, and nothing to take.
func (t *Tab) Same(v *pb.Voucher) bool {
	l := t.Last
	return l != nil && v.GetNonce() == l.GetNonce() && bytes.Equal(v.GetSignature(), l.GetSignature()) &&
		bytes.Equal(v.GetChannel(), l.GetChannel()) && bytes.Equal(v.GetAmount(), l.GetAmount()) &&
		v.GetLeaseId() == l.GetLeaseId() && v.GetMeteredMs() == l.GetMeteredMs()
}

// Covers says whether the channel's deposit covers the lease up to
// metered (the next beat): false when the channel would owe more than it
// holds, so the job stops before the provider serves what cannot be paid.
func (t *Tab) Covers(metered time.Duration) bool {
	return t.Deposit == nil || t.Owed(metered).Cmp(t.Deposit) <= 0
}

// Amount is the last voucher's amount (the base with none).
func (t *Tab) Amount() *big.Int {
	if t.Last == nil {
		return new(big.Int).Set(t.Base)
	}
	return new(big.Int).SetBytes(t.Last.GetAmount())
}
