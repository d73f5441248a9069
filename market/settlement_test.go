package market

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

func evmSettlement(chain uint64, token byte) *pb.Settlement {
	return &pb.Settlement{Kind: pb.SettlementKind_SETTLEMENT_EVM, ChainId: chain, Contract: bytes.Repeat([]byte{0xc0}, 20), Token: bytes.Repeat([]byte{token}, 20), UnitsPerMicro: 1}
}

func withPayee(s *pb.Settlement) *pb.Settlement {
	s.Payee = bytes.Repeat([]byte{0xaa}, 20)
	return s
}

func TestAnOfferFitsOnlyABidThatPaysAsItTakes(t *testing.T) {
	takesEVM := func(o *pb.Offer) { o.Settlements = []*pb.Settlement{withPayee(evmSettlement(1337, 1))} }
	runCheckCases(t, []checkCase{
		{name: "neither names a settlement: the ledger"},
		{name: "a bid paying by channel, an offer taking the ledger", bid: func(b *pb.Bid) { b.Settlement = evmSettlement(1337, 1) },
			check: "settlement", detail: "takes ledger; bid pays with evm (chain 1337"},
		{name: "a bid paying by channel, an offer taking it", offer: takesEVM, bid: func(b *pb.Bid) { b.Settlement = evmSettlement(1337, 1) }},
		{name: "an offer taking channels only, a ledger bid", offer: takesEVM, check: "settlement", detail: "bid pays with ledger"},
		{name: "another chain", offer: takesEVM, bid: func(b *pb.Bid) { b.Settlement = evmSettlement(1, 1) }, check: "settlement", detail: "chain 1,"},
		{name: "another token", offer: takesEVM, bid: func(b *pb.Bid) { b.Settlement = evmSettlement(1337, 2) }, check: "settlement", detail: "token 0x0202"},
		{name: "an offer taking both", offer: func(o *pb.Offer) {
			o.Settlements = []*pb.Settlement{{Kind: pb.SettlementKind_SETTLEMENT_LEDGER}, withPayee(evmSettlement(1337, 1))}
		}},
		{name: "none", offer: func(o *pb.Offer) { o.Settlements = []*pb.Settlement{{Kind: pb.SettlementKind_SETTLEMENT_NONE}} },
			bid: func(b *pb.Bid) { b.Settlement = &pb.Settlement{Kind: pb.SettlementKind_SETTLEMENT_NONE} }},
	})
}

func TestMalformedSettlementsAreRefusedWithTheirField(t *testing.T) {
	five := []*pb.Settlement{{}, {}, {}, {}, {}}
	cases := []struct {
		name   string
		offer  []*pb.Settlement
		bid    *pb.Settlement
		detail string
	}{
		{name: "too many", offer: five, detail: "settlements: 5; limit 4"},
		{name: "unknown kind", offer: []*pb.Settlement{{Kind: 9}}, detail: "settlements[0].kind: 9"},
		{name: "a ledger with a chain", offer: []*pb.Settlement{{ChainId: 1}}, detail: "ledger takes no chain"},
		{name: "evm without a payee", offer: []*pb.Settlement{evmSettlement(1, 1)}, detail: "settlements[0].payee: 0 bytes; want a 20-byte address"},
		{name: "a short contract", offer: []*pb.Settlement{func() *pb.Settlement { s := withPayee(evmSettlement(1, 1)); s.Contract = s.Contract[:19]; return s }()}, detail: "settlements[0].contract: 19 bytes"},
		{name: "no chain", offer: []*pb.Settlement{withPayee(evmSettlement(0, 1))}, detail: "settlements[0].chain_id: 0"},
		{name: "units out of range", offer: []*pb.Settlement{func() *pb.Settlement { s := withPayee(evmSettlement(1, 1)); s.UnitsPerMicro = 1e13; return s }()}, detail: "units_per_micro: 10000000000000"},
		{name: "a bid naming a payee", bid: withPayee(evmSettlement(1, 1)), detail: "settlement.payee: 20 bytes; want none"},
		{name: "a bid of no kind", bid: &pb.Settlement{Kind: -1}, detail: "settlement.kind: -1"},
	}
	for _, c := range cases {
		var err error
		if c.offer != nil {
			o := mtOffer(mtPeers[0], "o")
			o.Settlements = c.offer
			err = DefaultLimits().ValidateOffer(o, mtNow)
		} else {
			b := mtBid()
			b.Settlement = c.bid
			err = DefaultLimits().ValidateBid(b, mtNow)
		}
		if err == nil || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.detail)
		}
	}
}

func TestSettlementNamesRoundTrip(t *testing.T) {
	for _, s := range []string{"none", "ledger", "evm"} {
		k, err := ParseSettlement(s)
		if err != nil || SettlementName(k) != s {
			t.Errorf("%s: %v %v", s, k, err)
		}
	}
	if _, err := ParseSettlement("bitcoin"); err == nil || !strings.Contains(err.Error(), "want none, ledger or evm") {
		t.Errorf("bitcoin: %v", err)
	}
}

func TestExplainSaysWhenNoOfferTakesTheBidsMoney(t *testing.T) {
	b := NewBook()
	for i, p := range mtPeers[:3] {
		o := mtOffer(p, "o")
		if i == 0 {
			o.Settlements = []*pb.Settlement{withPayee(evmSettlement(1, 1))}
		}
		if err := b.PutOffer(o, mtNow); err != nil {
			t.Fatal(err)
		}
	}
	bid := mtBid()
	bid.Settlement = evmSettlement(1337, 1)
	m := NewMatcher(DefaultMatchConfig(), mtSources{}, mtSources{})
	if res := m.Match(b.Snapshot(), bid, mtNow, 5); len(res.Candidates) != 0 {
		t.Fatalf("%d candidates for money no offer takes", len(res.Candidates))
	}
	if e := m.Explain(b.Snapshot(), bid, mtNow).String(); !strings.Contains(e, "3 offers: does not take evm (chain 1337") {
		t.Fatalf("Explain does not say no offer takes the bid's money:\n%s", e)
	}
}
