package market

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/market/pb"
)

// MaxSettlements is the most ways to pay one offer lists.
const MaxSettlements = 4

// SettlementName is a settlement kind as config and the CLI spell it.
func SettlementName(k pb.SettlementKind) string {
	switch k {
	case pb.SettlementKind_SETTLEMENT_LEDGER:
		return "ledger"
	case pb.SettlementKind_SETTLEMENT_NONE:
		return "none"
	case pb.SettlementKind_SETTLEMENT_EVM:
		return "evm"
	}
	return fmt.Sprintf("kind %d", int32(k))
}

// ParseSettlement is the kind SettlementName spells s.
func ParseSettlement(s string) (pb.SettlementKind, error) {
	for _, k := range []pb.SettlementKind{pb.SettlementKind_SETTLEMENT_NONE, pb.SettlementKind_SETTLEMENT_LEDGER, pb.SettlementKind_SETTLEMENT_EVM} {
		if s == SettlementName(k) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("settlement kind %q: want none, ledger or evm", clip(s))
}

// ShowSettlement is s in a line: "ledger", or "evm (chain 1337, token
// 0x…, contract 0x…)".
func ShowSettlement(s *pb.Settlement) string {
	if s.GetKind() != pb.SettlementKind_SETTLEMENT_EVM {
		return SettlementName(s.GetKind())
	}
	return fmt.Sprintf("evm (chain %d, token 0x%x, contract 0x%x)", s.GetChainId(), s.GetToken(), s.GetContract())
}

// checkSettlement checks one way to pay, as field names it.
func checkSettlement(field string, s *pb.Settlement, payee bool) error {
	switch s.GetKind() {
	case pb.SettlementKind_SETTLEMENT_LEDGER, pb.SettlementKind_SETTLEMENT_NONE:
		if s.GetChainId() != 0 || len(s.GetContract())+len(s.GetToken())+len(s.GetPayee()) != 0 || s.GetUnitsPerMicro() != 0 {
			return invalid(field, "%s takes no chain, contract, token, units or payee", SettlementName(s.GetKind()))
		}
		return nil
	case pb.SettlementKind_SETTLEMENT_EVM:
	default:
		return invalid(field+".kind", "%d; want ledger, none or evm", int32(s.GetKind()))
	}
	for _, a := range []struct {
		name string
		v    []byte
		want bool
	}{{"contract", s.GetContract(), true}, {"token", s.GetToken(), true}, {"payee", s.GetPayee(), payee}} {
		if a.want && len(a.v) != AddressLen || !a.want && len(a.v) != 0 {
			return invalid(field+"."+a.name, "%d bytes; want %s", len(a.v), map[bool]string{true: "a 20-byte address", false: "none"}[a.want])
		}
	}
	if s.GetChainId() == 0 {
		return invalid(field+".chain_id", "0; want the chain's ID")
	}
	if u := s.GetUnitsPerMicro(); u == 0 || u > 1e12 {
		return invalid(field+".units_per_micro", "%d; want 1 to 10^12 (a token of 6 to 18 decimals)", u)
	}
	return nil
}

// offerSettlements checks the ways to pay an offer lists.
func offerSettlements(o *pb.Offer) error {
	if n := len(o.Settlements); n > MaxSettlements {
		return invalid("settlements", "%d; limit %d", n, MaxSettlements)
	}
	for i, s := range o.Settlements {
		if err := checkSettlement(indexed("settlements", i), s, s.GetKind() == pb.SettlementKind_SETTLEMENT_EVM); err != nil {
			return err
		}
	}
	return nil
}

// Accepted is the way to pay in o that fits what bid pays with (the
// provider's payee set), or nil when o takes none of it. An offer that
// lists none takes the ledger; a bid that names none pays by it.
func Accepted(o *pb.Offer, bid *pb.Settlement) *pb.Settlement {
	if len(o.GetSettlements()) == 0 {
		if bid.GetKind() == pb.SettlementKind_SETTLEMENT_LEDGER {
			return &pb.Settlement{}
		}
		return nil
	}
	for _, s := range o.GetSettlements() {
		if SameSettlement(s, bid) {
			return s
		}
	}
	return nil
}

// SameSettlement says whether a and b are one way to pay, payee aside.
func SameSettlement(a, b *pb.Settlement) bool {
	return a.GetKind() == b.GetKind() && a.GetChainId() == b.GetChainId() && a.GetUnitsPerMicro() == b.GetUnitsPerMicro() &&
		bytes.Equal(a.GetContract(), b.GetContract()) && bytes.Equal(a.GetToken(), b.GetToken())
}

func kindSettlement(p *bidPlan) string {
	return "does not take " + ShowSettlement(p.bid.GetSettlement())
}

// settleKey names a way to pay, payee aside: a SHA-256 digest of what
// SameSettlement compares, cut to 128 bits, so that an offer's facts hold
// its ways to pay in 16 bytes each and no one can make two ways collide.
type settleKey [16]byte

func keyOfSettlement(s *pb.Settlement) settleKey {
	h := sha256.New()
	var b [8]byte
	for _, v := range []uint64{uint64(s.GetKind()), s.GetChainId(), s.GetUnitsPerMicro(), uint64(len(s.GetContract()))} {
		binary.BigEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	h.Write(s.GetContract())
	h.Write(s.GetToken())
	var k settleKey
	copy(k[:], h.Sum(nil))
	return k
}

// takesKey says whether the offer of f takes what the plan's bid pays
// with, as Accepted does, from its keys alone: the matcher asks it of
// every offer it reads.
func (f *offerFacts) takesKey(p *bidPlan) bool {
	if len(f.settles) == 0 {
		return p.bid.GetSettlement().GetKind() == pb.SettlementKind_SETTLEMENT_LEDGER
	}
	return slices.Contains(f.settles, p.settle)
}

func fitsSettlement(c *evalCtx) bool {
	if !c.f.takesKey(c.p) {
		var takes []string
		for _, s := range c.offer().GetSettlements() {
			takes = append(takes, ShowSettlement(s))
		}
		if len(takes) == 0 {
			takes = []string{"ledger"}
		}
		return c.explain && c.failf("takes %s; bid pays with %s", strings.Join(takes, ", "), ShowSettlement(c.p.bid.GetSettlement()))
	}
	return true
}

// Sizes of a lease's payment on a channel: a channel's ID, an address,
// and at most an amount's big-endian bytes.
const (
	ChannelIDLen = 32
	AddressLen   = 20
	MaxAmountLen = 32
)

// leasePayment checks a lease's payment: a lease whose bid pays by
// channel (evm) names the channel, the payer and where the channel
// stood before it (base and nonce); any other names none.
func leasePayment(m *pb.Lease) error {
	p, kind := m.GetPayment(), m.GetBid().GetSettlement().GetKind()
	if kind != pb.SettlementKind_SETTLEMENT_EVM {
		if p != nil {
			return invalid("payment", "set, but the bid pays by %s", SettlementName(kind))
		}
		return nil
	}
	switch {
	case p == nil:
		return invalid("payment", "missing; the bid pays by channel (evm)")
	case !SameSettlement(p.GetSettlement(), m.GetBid().GetSettlement()):
		return invalid("payment.settlement", "%s; the bid pays with %s", ShowSettlement(p.GetSettlement()), ShowSettlement(m.GetBid().GetSettlement()))
	}
	return CheckPayment(p)
}

// CheckPayment checks the shape of a lease's payment on a channel: its
// channel, payer and base, and its settlement (evm, with the payee).
func CheckPayment(p *pb.LeasePayment) error {
	switch {
	case len(p.GetChannel()) != ChannelIDLen:
		return invalid("payment.channel", "%d bytes; want %d", len(p.GetChannel()), ChannelIDLen)
	case len(p.GetPayer()) != AddressLen:
		return invalid("payment.payer", "%d bytes; want a %d-byte address", len(p.GetPayer()), AddressLen)
	case len(p.GetBase()) > MaxAmountLen:
		return invalid("payment.base", "%d bytes; limit %d", len(p.GetBase()), MaxAmountLen)
	}
	return checkSettlement("payment.settlement", p.GetSettlement(), true)
}

// admitPayment checks that a lease pays this offer the way it accepts,
// to its payee.
func admitPayment(o *pb.Offer, l *pb.Lease) error {
	if l.GetPayment() == nil {
		return nil
	}
	s := Accepted(o, l.GetBid().GetSettlement())
	if s == nil || !bytes.Equal(s.GetPayee(), l.GetPayment().GetSettlement().GetPayee()) {
		return Reject(pb.RejectCode_REJECT_DOES_NOT_FIT, "payment.settlement: %s to payee 0x%x is not what this offer takes", ShowSettlement(l.GetPayment().GetSettlement()), l.GetPayment().GetSettlement().GetPayee())
	}
	return nil
}
