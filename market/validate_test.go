package market

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"google.golang.org/protobuf/proto"
)

func TestValidateOffer(t *testing.T) {
	_, id := fuzzKey(t)
	l := DefaultLimits()
	if err := l.ValidateOffer(fuzzSeedOffer(id), fuzzNow); err != nil {
		t.Fatalf("seed offer invalid: %v", err)
	}
	hour := time.Hour.Milliseconds()
	now := fuzzNow.UnixMilli()
	cases := []struct {
		field string
		edit  func(*pb.Offer)
	}{
		{"header", func(o *pb.Offer) { o.Header = nil }},
		{"header.version", func(o *pb.Offer) { o.Header.Version = 2 }},
		{"header.issuer", func(o *pb.Offer) { o.Header.Issuer = []byte("x") }},
		{"header.id", func(o *pb.Offer) { o.Header.Id = "" }},
		{"header.swarm", func(o *pb.Offer) { o.Header.Swarm = "lab-01234567" }},
		{"header.id", func(o *pb.Offer) { o.Header.Id = "has space" }},
		{"header.id", func(o *pb.Offer) { o.Header.Id = ".." }},
		{"header.id", func(o *pb.Offer) { o.Header.Id = "." }},
		{"header.seq", func(o *pb.Offer) { o.Header.Seq = 0 }},
		{"header.expires_unix_ms", func(o *pb.Offer) { o.Header.ExpiresUnixMs = o.Header.CreatedUnixMs }},
		{"header.expires_unix_ms", func(o *pb.Offer) { o.Header.ExpiresUnixMs = now + 25*hour }},
		{"gpus", func(o *pb.Offer) { o.Gpus = nil }},
		{"gpus[0].model", func(o *pb.Offer) { o.Gpus[0].Model = "" }},
		{"gpus[0].count", func(o *pb.Offer) { o.Gpus[0].Count = 0 }},
		{"gpus[0].count", func(o *pb.Offer) { o.Gpus[0].Count = 65 }},
		{"gpus[0].vram_bytes", func(o *pb.Offer) { o.Gpus[0].VramBytes = 0 }},
		{"gpus[0].compute_capability", func(o *pb.Offer) { o.Gpus[0].ComputeCapability = 0 }},
		{"region.country", func(o *pb.Offer) { o.Region.Country = "Germany" }},
		{"region.country", func(o *pb.Offer) { o.Region = nil }},
		{"currency", func(o *pb.Offer) { o.Currency = "usd" }},
		{"price_micros", func(o *pb.Offer) { o.PriceMicros = 0 }},
		{"price_micros", func(o *pb.Offer) { o.PriceMicros = l.MaxPriceMicros + 1 }},
		{"tier_prices[0].tier", func(o *pb.Offer) { o.TierPrices[0].Tier = pb.Tier_TIER_UNSPECIFIED }},
		{"tier_prices[0].micros_per_gpu_hour", func(o *pb.Offer) { o.TierPrices[0].MicrosPerGpuHour = 1 }},
		{"min_duration_seconds", func(o *pb.Offer) { o.MinDurationSeconds = 0 }},
		{"max_duration_seconds", func(o *pb.Offer) { o.MaxDurationSeconds = o.MinDurationSeconds - 1 }},
		{"windows[0]", func(o *pb.Offer) { o.Windows[0].EndUnixMs = o.Windows[0].StartUnixMs }},
		{"windows[1]", func(o *pb.Offer) {
			o.Windows = append(o.Windows, &pb.Interval{StartUnixMs: now + hour, EndUnixMs: now + 3*hour})
		}},
		{"windows[0].floor_micros", func(o *pb.Offer) { o.Windows[0].FloorMicros = 1 }},
		{"weekly[0]", func(o *pb.Offer) { o.Weekly[0].EndMinute = minutesPerWeek + 1 }},
		{"weekly[1]", func(o *pb.Offer) { o.Weekly = append(o.Weekly, &pb.WeeklyWindow{StartMinute: 100, EndMinute: 200}) }},
		{"tiers", func(o *pb.Offer) { o.Tiers = nil }},
		{"tiers[0]", func(o *pb.Offer) { o.Tiers[0] = pb.Tier(9) }},
		{"bronze_notice_seconds", func(o *pb.Offer) { o.BronzeNoticeSeconds = 0 }},
		{"max_start_ahead_seconds", func(o *pb.Offer) { o.MaxStartAheadSeconds = 367 * 24 * 3600 }},
		{"gpu_step", func(o *pb.Offer) { o.GpuStep = 65 }},
		{"workload_classes", func(o *pb.Offer) { o.WorkloadClasses = make([]string, 33) }},
		{"image_allow[0]", func(o *pb.Offer) { o.ImageAllow = []string{strings.Repeat("x", 257)} }},
		{"attestation_hash", func(o *pb.Offer) { o.AttestationHash = make([]byte, 65) }},
		{"coordinate.vec", func(o *pb.Offer) { o.Coordinate = &pb.NetworkCoordinate{Vec: make([]float64, 17)} }},
		{"coordinate.vec[3]", func(o *pb.Offer) {
			o.Coordinate = &pb.NetworkCoordinate{Vec: []float64{0, 0, 0, math.NaN(), 0, 0, 0, 0}}
		}},
		{"coordinate.vec[0]", func(o *pb.Offer) { o.Coordinate = &pb.NetworkCoordinate{Vec: []float64{11, 0, 0, 0, 0, 0, 0, 0}} }},
		{"coordinate.error", func(o *pb.Offer) { o.Coordinate = &pb.NetworkCoordinate{Vec: make([]float64, 8), Error: -0.1} }},
		{"coordinate.adjustment", func(o *pb.Offer) {
			o.Coordinate = &pb.NetworkCoordinate{Vec: make([]float64, 8), Adjustment: math.Inf(1)}
		}},
		{"coordinate.height", func(o *pb.Offer) { o.Coordinate = &pb.NetworkCoordinate{Vec: make([]float64, 8), Height: 20} }},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			o := proto.Clone(fuzzSeedOffer(id)).(*pb.Offer)
			tc.edit(o)
			err := l.ValidateOffer(o, fuzzNow)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want a FieldError for %s", err, tc.field)
			}
		})
	}
}

func TestValidateTiming(t *testing.T) {
	_, id := fuzzKey(t)
	l := DefaultLimits()
	o := fuzzSeedOffer(id)
	if err := l.ValidateOffer(o, fuzzNow.Add(2*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("validated after expiry: %v", err)
	}
	if err := l.ValidateOffer(o, fuzzNow.Add(-time.Minute)); !errors.Is(err, ErrFuture) {
		t.Errorf("validated a minute before creation: %v", err)
	}
	if err := l.ValidateOffer(o, fuzzNow.Add(-20*time.Second)); err != nil {
		t.Errorf("20 s of clock skew refused: %v", err)
	}
	w := proto.Clone(o).(*pb.Offer)
	w.Withdrawn, w.Gpus = true, nil
	if err := l.ValidateOffer(w, fuzzNow); err != nil {
		t.Errorf("a withdrawal needs only its header: %v", err)
	}
}

func TestValidateBid(t *testing.T) {
	_, id := fuzzKey(t)
	l := DefaultLimits()
	if err := l.ValidateBid(fuzzSeedBid(id), fuzzNow); err != nil {
		t.Fatalf("seed bid invalid: %v", err)
	}
	cases := []struct {
		field string
		edit  func(*pb.Bid)
	}{
		{"header.seq", func(b *pb.Bid) { b.Header.Seq = 0 }},
		{"gpu.count", func(b *pb.Bid) { b.Gpu.Count = 0 }},
		{"gpu.count", func(b *pb.Bid) { b.Gpu = nil }},
		{"gpu.min_per_provider", func(b *pb.Bid) { b.Gpu.MinPerProvider = 3 }},
		{"gpu.models", func(b *pb.Bid) { b.Gpu.Models = make([]string, 33) }},
		{"gpu.form_factor", func(b *pb.Bid) { b.Gpu.FormFactor = "socket" }},
		{"tier", func(b *pb.Bid) { b.Tier = pb.Tier_TIER_UNSPECIFIED }},
		{"currency", func(b *pb.Bid) { b.Currency = "" }},
		{"max_price_micros", func(b *pb.Bid) { b.MaxPriceMicros = 0 }},
		{"duration_seconds", func(b *pb.Bid) { b.DurationSeconds = 0 }},
		{"latest_start_unix_ms", func(b *pb.Bid) { b.EarliestStartUnixMs, b.LatestStartUnixMs = 10, 5 }},
		{"regions_allowed[0]", func(b *pb.Bid) { b.RegionsAllowed = []string{"de"} }},
		{"regions_denied[0]", func(b *pb.Bid) { b.RegionsDenied = []string{"XYZ"} }},
		{"min_reliability_permille", func(b *pb.Bid) { b.MinReliabilityPermille = 1001 }},
		{"image", func(b *pb.Bid) { b.Image = strings.Repeat("i", 300) }},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			b := proto.Clone(fuzzSeedBid(id)).(*pb.Bid)
			tc.edit(b)
			err := l.ValidateBid(b, fuzzNow)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a FieldError for %s", err, tc.field)
			}
		})
	}
}

func TestValidateQuote(t *testing.T) {
	_, id := fuzzKey(t)
	l := DefaultLimits()
	if err := l.ValidateQuote(fuzzSeedQuote(id), fuzzNow); err != nil {
		t.Fatalf("seed quote invalid: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*pb.Quote)
	}{
		{"bid_issuer", func(q *pb.Quote) { q.BidIssuer = nil }},
		{"bid_id", func(q *pb.Quote) { q.OfferId = "" }},
		{"tier", func(q *pb.Quote) { q.Tier = 0 }},
		{"currency", func(q *pb.Quote) { q.Currency = "$" }},
		{"price_micros", func(q *pb.Quote) { q.PriceMicros = 0 }},
		{"gpus", func(q *pb.Quote) { q.Gpus = 0 }},
		{"duration_seconds", func(q *pb.Quote) { q.DurationSeconds = 0 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			q := proto.Clone(fuzzSeedQuote(id)).(*pb.Quote)
			tc.edit(q)
			var fe *FieldError
			if err := l.ValidateQuote(q, fuzzNow); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a FieldError for %s", err, tc.field)
			}
		})
	}
}

// An ID as a datastore key element: what the market accepts stays
// readable, and nothing, whatever its bytes, names a parent, itself or a
// path of several elements.
func TestKeyPart(t *testing.T) {
	for in, want := range map[string]string{
		"lease-4f2a": "lease-4f2a", "gpus:v2_b": "gpus:v2_b",
		".": "%2E", "..": "%2E%2E", "a.b": "a%2Eb", "a/../b": "a%2F%2E%2E%2Fb", "%": "%25",
	} {
		if got := KeyPart(in); got != want {
			t.Errorf("KeyPart(%q) = %q, want %q", in, got, want)
		}
	}
}
