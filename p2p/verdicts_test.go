package p2p_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// verdictCounts reads a validator's verdicts as topic/result/reason.
func verdictCounts(v *p2p.MarketValidator) map[string]int64 {
	out := map[string]int64{}
	v.EachVerdict(func(topic, result, reason string, n int64) { out[topic+"/"+result+"/"+reason] = n })
	return out
}

// Every verdict on an offer or a bid, however it came, is counted once
// under its topic, result and reason, and under nothing else: the reasons
// a metric reports are what the validator decided on, from a fixed set.
func TestEveryVerdictIsCountedWithItsReason(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	seqs, err := p2p.OpenSeqGuard(ctx, dssync.MutexWrap(ds.NewMapDatastore()))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newSigner(t, nil), newSigner(t, nil), newSigner(t, nil)
	seqs.SetCap(p2p.TopicOffers, 2)
	// A full table forgets its oldest stranger's ID for a newcomer; it is
	// full for good (ids_full) only of IDs it favours.
	seqs.SetLimit(p2p.TopicOffers, 3, func(p peer.ID) bool { return p == a.id || p == b.id })
	v := p2p.NewMarketValidator(market.DefaultLimits(), seqs, func() time.Time { return now }, nil)
	first := a.offer(t, "one", 1, now)
	o, _ := market.Open[*pb.Offer](first)
	o.Header.Issuer = []byte(b.id)
	forged := resign(t, a.key, o)
	o, _ = market.Open[*pb.Offer](a.offer(t, "bad", 1, now))
	o.Currency = "usd"
	malformed, err := market.Sign(a.key, o)
	if err != nil {
		t.Fatal(err)
	}
	offer := func(env []byte) pubsub.ValidationResult { _, res := v.CheckOffer(ctx, env); return res }
	for _, tc := range []struct {
		what   string
		check  func([]byte) pubsub.ValidationResult
		env    []byte
		want   string // topic/result/reason
		result pubsub.ValidationResult
	}{
		{"an offer", offer, first, "offers/accept/ok", pubsub.ValidationAccept},
		{"the same offer again", offer, first, "offers/ignore/stale_seq", pubsub.ValidationIgnore},
		{"the issuer's second offer", offer, a.offer(t, "two", 1, now), "offers/accept/ok", pubsub.ValidationAccept},
		{"an offer beyond the issuer's cap", offer, a.offer(t, "three", 1, now), "offers/ignore/issuer_cap", pubsub.ValidationIgnore},
		{"another issuer's offer", offer, b.offer(t, "one", 1, now), "offers/accept/ok", pubsub.ValidationAccept},
		{"an offer beyond the node's limit", offer, c.offer(t, "one", 1, now), "offers/ignore/ids_full", pubsub.ValidationIgnore},
		{"an expired offer", offer, b.offer(t, "old", 1, now.Add(-2*time.Hour)), "offers/ignore/expired", pubsub.ValidationIgnore},
		{"an offer from the future", offer, b.offer(t, "ahead", 1, now.Add(time.Hour)), "offers/ignore/future", pubsub.ValidationIgnore},
		{"an oversized envelope", offer, bytes.Repeat([]byte{1}, market.MaxEnvelopeSize+1), "offers/reject/too_large", pubsub.ValidationReject},
		{"garbage", offer, []byte("garbage"), "offers/reject/signature", pubsub.ValidationReject},
		{"an offer signed by another key than its issuer's", offer, forged, "offers/reject/wrong_issuer", pubsub.ValidationReject},
		{"a malformed offer", offer, malformed, "offers/reject/invalid", pubsub.ValidationReject},
		{"garbage on the bids topic", func(env []byte) pubsub.ValidationResult { _, res := v.CheckBid(ctx, env); return res },
			[]byte("garbage"), "bids/reject/signature", pubsub.ValidationReject},
	} {
		before := verdictCounts(v)
		if got := tc.check(tc.env); got != tc.result {
			t.Errorf("%s: verdict %v, want %v", tc.what, got, tc.result)
		}
		for k, n := range verdictCounts(v) {
			want := before[k]
			if k == tc.want {
				want++
			}
			if n != want {
				t.Errorf("%s: %s counts %d, want %d", tc.what, k, n, want)
			}
		}
		if _, ok := before[tc.want]; !ok {
			t.Errorf("%s: no series %s", tc.what, tc.want)
		}
	}
	if sum := v.Accepted.Load() + v.Rejected.Load() + v.Ignored.Load(); sum != 13 {
		t.Errorf("the totals count %d verdicts, want 13", sum)
	}
}
