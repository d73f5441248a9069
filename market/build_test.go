package market

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

func TestNewBid(t *testing.T) {
	spec := BidSpec{Models: []string{"H100"}, MinVRAMBytes: 40 << 30, Count: 2, Tier: pb.Tier_TIER_SILVER, Currency: "USD",
		MaxPriceMicros: 2_500_000, DurationSeconds: 3600, RegionsAllowed: []string{"DE"}, Image: "idlegrid-test/busybox:1"}
	for _, c := range []struct {
		name  string
		edit  func(*BidSpec)
		check func(*testing.T, *pb.Bid)
		err   string
	}{
		{"a bid starting now leaves the slack", nil, func(t *testing.T, b *pb.Bid) {
			if b.EarliestStartUnixMs != mtNow.UnixMilli() || b.LatestStartUnixMs != mtNow.Add(StartSlack).UnixMilli() || b.Header.ExpiresUnixMs != mtNow.Add(BidTTL).UnixMilli() {
				t.Errorf("window %d..%d, expiry %d", b.EarliestStartUnixMs, b.LatestStartUnixMs, b.Header.ExpiresUnixMs)
			}
		}, ""},
		{"a later start", func(s *BidSpec) { s.StartWithin = 3 * time.Hour }, func(t *testing.T, b *pb.Bid) {
			if b.LatestStartUnixMs != mtNow.Add(3*time.Hour).UnixMilli() {
				t.Errorf("latest start %d", b.LatestStartUnixMs)
			}
		}, ""},
		{"bronze accepts preemption", func(s *BidSpec) { s.Tier = pb.Tier_TIER_BRONZE }, func(t *testing.T, b *pb.Bid) {
			if !b.PreemptionOk {
				t.Error("a bronze bid refuses preemption")
			}
		}, ""},
		{"no GPUs", func(s *BidSpec) { s.Count = 0 }, nil, "gpu.count"},
		{"a bad currency", func(s *BidSpec) { s.Currency = "usd" }, nil, "currency"},
		{"a bad region", func(s *BidSpec) { s.RegionsAllowed = []string{"Germany"} }, nil, "regions_allowed[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := spec
			if c.edit != nil {
				c.edit(&s)
			}
			b, err := NewBid(mtPeers[7], "bid-1", s, mtNow, DefaultLimits())
			if c.err != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, b)
		})
	}
}

func TestNewQuoteAnswersItsBid(t *testing.T) {
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	o, b := mtOffer(mtPeers[0], "gpus"), mtBid()
	c, why := m.Feasible(o, b, mtNow)
	if why != nil {
		t.Fatal(why)
	}
	q := NewQuote(mtPeers[0], b, c, mtNow, 5*time.Minute)
	if err := DefaultLimits().ValidateQuote(q, mtNow); err != nil {
		t.Fatal(err)
	}
	if err := QuoteAnswers(q, b); err != nil {
		t.Fatalf("a quote made for the bid: %v", err)
	}
	other := mtBid()
	other.Header.Id = "bid-with-a-much-longer-id"
	if q2 := NewQuote(mtPeers[0], other, c, mtNow, time.Minute); len(q2.Header.Id) != len(q.Header.Id) || q2.Header.Id == q.Header.Id {
		t.Errorf("quote IDs %q and %q: want one per bid, of one length", q.Header.Id, q2.Header.Id)
	}
	for _, tc := range []struct {
		name, field string
		edit        func(*pb.Quote)
	}{
		{"another bid", "bid", func(q *pb.Quote) { q.BidId = "bid-2" }},
		{"an older seq of the bid", "bid", func(q *pb.Quote) { q.BidSeq = 0 }},
		{"another tier", "tier", func(q *pb.Quote) { q.Tier = pb.Tier_TIER_GOLD }},
		{"another currency", "currency", func(q *pb.Quote) { q.Currency = "EUR" }},
		{"above the cap", "price_micros", func(q *pb.Quote) { q.PriceMicros = b.MaxPriceMicros + 1 }},
		{"another duration", "duration_seconds", func(q *pb.Quote) { q.DurationSeconds++ }},
		{"more GPUs than asked", "gpus", func(q *pb.Quote) { q.Gpus = b.Gpu.Count + 1 }},
		{"a start before the bid's", "start_unix_ms", func(q *pb.Quote) { q.StartUnixMs = b.EarliestStartUnixMs - 1 }},
	} {
		bad := proto.Clone(q).(*pb.Quote)
		tc.edit(bad)
		var fe *FieldError
		if err := QuoteAnswers(bad, b); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.field)
		}
	}
}

func TestNewLeaseAndReceipt(t *testing.T) {
	rk, pk, renter, provider := leaseParties(t)
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	o, b := mtOffer(provider, "gpus"), mtBid()
	b.Header.Issuer = []byte(renter)
	c, why := m.Feasible(o, b, mtNow)
	if why != nil {
		t.Fatal(why)
	}
	l, err := NewLease(LeaseTerms{ID: "lease-1", Renter: renter, Bid: b, Candidate: c, Start: mtNow, Command: []string{"true"}}, mtNow, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if string(l.Provider) != string(provider) || l.GpuCount != 8 || l.PriceMicros != 2_000_000 || l.Workload.Image != b.Image || l.Workload.WorkloadClass != b.WorkloadClass {
		t.Errorf("lease %v", l)
	}
	if _, err := NewLease(LeaseTerms{ID: "lease-2", Renter: provider, Bid: b, Candidate: c, Start: mtNow}, mtNow, DefaultLimits()); !errors.Is(err, ErrInvalid) {
		t.Errorf("a lease of a provider with itself: %v", err)
	}
	ls, err := NewCoSigned(rk, Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := CoSign[*pb.Lease](pk, Provider, ls); err != nil {
		t.Fatal(err)
	}
	// Both sides build the receipt from the same chain: the same bytes.
	terms := ReceiptTerms{Outcome: pb.Outcome_OUTCOME_COMPLETED, End: mtNow.Add(2 * time.Hour), Beats: 7, Root: []byte("root"),
		LastBeat: mtNow.Add(90 * time.Minute), ExitCode: 0, Note: "done"}
	a, z := NewReceipt(l, ls, terms), NewReceipt(l, ls, terms)
	if !proto.Equal(a, z) {
		t.Error("one chain, two receipts")
	}
	if a.MeteredSeconds != 5400 || a.AmountMicros != LeaseTotal(l.PriceMicros, l.GpuCount, 5400) || string(a.LeaseHash) != string(BodyHash(ls)) {
		t.Errorf("receipt metered %d s for %d", a.MeteredSeconds, a.AmountMicros)
	}
	none := NewReceipt(l, ls, ReceiptTerms{End: mtNow})
	if none.Outcome != pb.Outcome_OUTCOME_FAILED || none.MeteredSeconds != 0 || none.AmountMicros != 0 {
		t.Errorf("a receipt with no outcome and no beat: %v", none)
	}
}

func TestAdmitLease(t *testing.T) {
	_, _, renter, provider := leaseParties(t)
	m := NewMatcher(DefaultMatchConfig(), nil, nil)
	base := func() (*pb.Offer, *pb.Lease) {
		o, b := mtOffer(provider, "gpus"), mtBid()
		b.Header.Issuer = []byte(renter)
		b.Gpu.Count = 2
		c, why := m.Feasible(o, b, mtNow)
		if why != nil {
			t.Fatal(why)
		}
		l, err := NewLease(LeaseTerms{ID: "lease-1", Renter: renter, Bid: b, Candidate: c, Start: mtNow}, mtNow, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return o, l
	}
	for _, c := range []struct {
		name   string
		edit   func(*pb.Offer, *pb.Lease)
		code   pb.RejectCode
		reason string
	}{
		{"fits", func(*pb.Offer, *pb.Lease) {}, pb.RejectCode_REJECT_UNSPECIFIED, ""},
		{"a start within the skew", func(_ *pb.Offer, l *pb.Lease) { l.StartUnixMs -= 20_000 }, pb.RejectCode_REJECT_UNSPECIFIED, ""},
		{"a start in the past", func(_ *pb.Offer, l *pb.Lease) { l.StartUnixMs -= 3_600_000 }, pb.RejectCode_REJECT_START, "is in the past"},
		{"a start further ahead than the offer books", func(_ *pb.Offer, l *pb.Lease) { l.StartUnixMs = mtNow.Add(200 * time.Hour).UnixMilli() }, pb.RejectCode_REJECT_START, "more than 168h0m0s ahead"},
		{"an offer that books further ahead", func(o *pb.Offer, l *pb.Lease) {
			o.MaxStartAheadSeconds = 300 * 3600
			l.StartUnixMs = mtNow.Add(200 * time.Hour).UnixMilli()
		}, pb.RejectCode_REJECT_UNSPECIFIED, ""},
		{"no offer", func(o *pb.Offer, _ *pb.Lease) { o.Header.Id = "other" }, pb.RejectCode_REJECT_NO_OFFER, `no offer "gpus"`},
		{"a withdrawn offer", func(o *pb.Offer, _ *pb.Lease) { o.Withdrawn = true }, pb.RejectCode_REJECT_NO_OFFER, "no offer"},
		{"too long", func(o *pb.Offer, _ *pb.Lease) { o.MaxDurationSeconds = 3600 }, pb.RejectCode_REJECT_DURATION, "duration 4h0m0s outside this offer's 1h0m0s to 1h0m0s"},
		{"the offer does not fit the bid", func(o *pb.Offer, l *pb.Lease) {
			o.Gpus = []*pb.GPUGroup{{Model: "H100", Count: 1, VramBytes: 80 << 30, ComputeCapability: 90}, {Model: "A100", Count: 1, VramBytes: 80 << 30, ComputeCapability: 80}}
		}, pb.RejectCode_REJECT_DOES_NOT_FIT, "per provider required"},
		{"a price below the provider's", func(_ *pb.Offer, l *pb.Lease) { l.PriceMicros = 1_500_000 }, pb.RejectCode_REJECT_PRICE, "price 1.50 below this provider's 2.00"},
		{"an offer sold in pairs", func(o *pb.Offer, _ *pb.Lease) { o.GpuStep = 2 }, pb.RejectCode_REJECT_UNSPECIFIED, ""},
		{"an offer sold in fours", func(o *pb.Offer, _ *pb.Lease) { o.GpuStep = 4 }, pb.RejectCode_REJECT_DOES_NOT_FIT, "sold in steps of 4 GPUs"},
		{"an offer sold whole", func(o *pb.Offer, _ *pb.Lease) { o.GpusWhole = true }, pb.RejectCode_REJECT_DOES_NOT_FIT, "sold whole"},
		{"a pool member's odd part of an offer sold in pairs", func(o *pb.Offer, l *pb.Lease) {
			o.GpuStep = 2
			l.Bid.Gpu.Count, l.Bid.Gpu.MinPerProvider, l.GpuCount = 8, 1, 3
		}, pb.RejectCode_REJECT_DOES_NOT_FIT, "3 GPUs: this offer sells GPUs in steps of 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, l := base()
			c.edit(o, l)
			model, err := AdmitLease(m, o, l, mtNow)
			if c.code == pb.RejectCode_REJECT_UNSPECIFIED {
				if err != nil || model != "H100" {
					t.Fatalf("admitted %q, %v", model, err)
				}
				return
			}
			var re *RejectError
			if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(re.Reason, c.reason) {
				t.Fatalf("%v; want %v with %q", err, c.code, c.reason)
			}
			if r := re.Reply(); r.Code != c.code || RejectOf(r).Error() != re.Error() {
				t.Errorf("reply %v does not carry the refusal %v", r, re)
			}
		})
	}
}

func TestRejectAdmission(t *testing.T) {
	for code, want := range map[AdmissionCode]pb.RejectCode{
		AdmissionStartInPast: pb.RejectCode_REJECT_START, AdmissionNotAvailable: pb.RejectCode_REJECT_NOT_AVAILABLE,
		AdmissionBelowFloor: pb.RejectCode_REJECT_PRICE, AdmissionNoCapacity: pb.RejectCode_REJECT_NO_CAPACITY,
		AdmissionBadRequest: pb.RejectCode_REJECT_BAD_REQUEST, AdmissionStale: pb.RejectCode_REJECT_BAD_REQUEST,
	} {
		if got := RejectAdmission(&AdmissionError{Code: code, Reason: "r"}); got.Code != want || !strings.Contains(got.Reason, "r") {
			t.Errorf("%v: %v", code, got)
		}
	}
	if got := RejectAdmission(errors.New("disk on fire")); got.Code != pb.RejectCode_REJECT_INTERNAL {
		t.Errorf("a plain error: %v", got)
	}
	if got := RejectOf(&pb.LeaseReply{Reason: "?"}); got.Code != pb.RejectCode_REJECT_INTERNAL {
		t.Errorf("a reply with no code: %v", got)
	}
}
