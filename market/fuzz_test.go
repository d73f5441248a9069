package market

import (
	"errors"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// fuzzNow is the fixed clock of the fuzz targets.
var fuzzNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type seededReader struct{ b byte }

func (r *seededReader) Read(p []byte) (int, error) {
	for i := range p {
		r.b = r.b*31 + 7
		p[i] = r.b
	}
	return len(p), nil
}

func fuzzKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	key, _, err := crypto.GenerateEd25519Key(&seededReader{b: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	return key, id
}

func fuzzHeader(id peer.ID, name string) *pb.Header {
	return &pb.Header{Version: Version, Issuer: []byte(id), Id: name, Seq: 1,
		CreatedUnixMs: fuzzNow.UnixMilli(), ExpiresUnixMs: fuzzNow.Add(time.Hour).UnixMilli()}
}

func fuzzSeedOffer(id peer.ID) *pb.Offer {
	return &pb.Offer{
		Header:   fuzzHeader(id, "offer-1"),
		Gpus:     []*pb.GPUGroup{{Model: "H100", Count: 8, VramBytes: 80 << 30, ComputeCapability: 90, Interconnect: "nvlink"}},
		Host:     &pb.HostSpec{CpuCores: 64, RamBytes: 512 << 30},
		Region:   &pb.Region{Country: "DE", Label: "frankfurt"},
		Currency: "USD", PriceMicros: 2_100_000,
		TierPrices:         []*pb.TierPrice{{Tier: pb.Tier_TIER_BRONZE, MicrosPerGpuHour: 1_200_000}},
		MinDurationSeconds: 600, MaxDurationSeconds: 86400,
		Windows:             []*pb.Interval{{StartUnixMs: fuzzNow.UnixMilli(), EndUnixMs: fuzzNow.Add(2 * time.Hour).UnixMilli()}},
		Weekly:              []*pb.WeeklyWindow{{StartMinute: 0, EndMinute: 600, FloorMicros: 1_000_000}},
		Tiers:               []pb.Tier{pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE},
		BronzeNoticeSeconds: 120,
		WorkloadClasses:     []string{"training"},
	}
}

func fuzzSeedBid(id peer.ID) *pb.Bid {
	return &pb.Bid{
		Header:   fuzzHeader(id, "bid-1"),
		Gpu:      &pb.GPURequirement{Models: []string{"H100"}, MinVramBytes: 40 << 30, Count: 2},
		Tier:     pb.Tier_TIER_SILVER,
		Currency: "USD", MaxPriceMicros: 2_500_000, DurationSeconds: 3600,
		RegionsAllowed: []string{"DE"},
	}
}

func fuzzSeedQuote(id peer.ID) *pb.Quote {
	return &pb.Quote{Header: fuzzHeader(id, "quote-1"), BidIssuer: []byte(id), BidId: "bid-1", BidSeq: 1,
		OfferId: "offer-1", Tier: pb.Tier_TIER_SILVER, Currency: "USD", PriceMicros: 2_100_000, Gpus: 2, DurationSeconds: 3600}
}

// checkOpened asserts what Open promises of every message it returns.
func checkOpened[M Message](t *testing.T, data []byte, m M, err error) {
	if err != nil {
		if !errors.Is(err, ErrSignature) && !errors.Is(err, ErrWrongIssuer) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Open failed with an unclassified error: %v", err)
		}
		return
	}
	if len(data) > MaxEnvelopeSize {
		t.Fatalf("Open accepted %d bytes", len(data))
	}
	if _, err := peer.IDFromBytes(m.GetHeader().GetIssuer()); err != nil {
		t.Fatalf("Open returned a message whose issuer is not a peer ID")
	}
}

func FuzzOpenOffer(f *testing.F) {
	key, id := fuzzKey(f)
	env, err := Sign(key, fuzzSeedOffer(id))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := Open[*pb.Offer](data)
		checkOpened(t, data, o, err)
		if err == nil {
			DefaultLimits().ValidateOffer(o, fuzzNow)
		}
	})
}

func FuzzOpenBid(f *testing.F) {
	key, id := fuzzKey(f)
	env, err := Sign(key, fuzzSeedBid(id))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Open[*pb.Bid](data)
		checkOpened(t, data, b, err)
		if err == nil {
			DefaultLimits().ValidateBid(b, fuzzNow)
		}
	})
}

func FuzzOpenQuote(f *testing.F) {
	key, id := fuzzKey(f)
	env, err := Sign(key, fuzzSeedQuote(id))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := Open[*pb.Quote](data)
		checkOpened(t, data, q, err)
		if err == nil {
			DefaultLimits().ValidateQuote(q, fuzzNow)
		}
	})
}

// FuzzValidateOffer feeds arbitrary offer payloads (no signature in the
// way) to the validator: it must never panic, and what it accepts must be
// within the limits.
func FuzzValidateOffer(f *testing.F) {
	_, id := fuzzKey(f)
	seed, _ := proto.Marshal(fuzzSeedOffer(id))
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var o pb.Offer
		if proto.Unmarshal(data, &o) != nil {
			return
		}
		l := DefaultLimits()
		if err := l.ValidateOffer(&o, fuzzNow); err != nil || o.Withdrawn {
			return
		}
		if len(o.Gpus) == 0 || o.PriceMicros < l.MinPriceMicros || o.PriceMicros > l.MaxPriceMicros || o.Header.ExpiresUnixMs <= fuzzNow.UnixMilli() {
			t.Fatalf("accepted an offer outside the limits: %v", &o)
		}
		for i := 1; i < len(o.Windows); i++ {
			if o.Windows[i].StartUnixMs < o.Windows[i-1].EndUnixMs {
				t.Fatalf("accepted overlapping windows: %v", o.Windows)
			}
		}
	})
}

// FuzzValidateBid does the same for bids.
func FuzzValidateBid(f *testing.F) {
	_, id := fuzzKey(f)
	seed, _ := proto.Marshal(fuzzSeedBid(id))
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b pb.Bid
		if proto.Unmarshal(data, &b) != nil {
			return
		}
		if err := DefaultLimits().ValidateBid(&b, fuzzNow); err != nil {
			return
		}
		if b.Gpu.Count == 0 || b.Gpu.MinPerProvider > b.Gpu.Count || b.DurationSeconds == 0 {
			t.Fatalf("accepted a bid outside the limits: %v", &b)
		}
	})
}

// Signer reads any bytes without a panic, and whatever Open takes was
// signed by the peer Signer names: the meter that trusts it before the
// signature is checked never charges a verified message to another.
func FuzzSigner(f *testing.F) {
	key, id := fuzzKey(f)
	env, err := Sign(key, fuzzSeedOffer(id))
	if err != nil {
		f.Fatal(err)
	}
	if got, ok := Signer(env); !ok || got != id {
		f.Fatalf("Signer of a signed offer: %s, %v; want %s", got, ok, id)
	}
	f.Add(env)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		signer, ok := Signer(data)
		o, err := Open[*pb.Offer](data)
		if err == nil && ok && signer != Issuer(o) {
			t.Fatalf("Signer says %s; Open verified an offer of %s", signer, Issuer(o))
		}
	})
}

// FuzzClaimedOffer: ClaimedOffer reads any bytes without panicking, and
// where Open verifies an offer, claims what its verified header says.
func FuzzClaimedOffer(f *testing.F) {
	key, id := fuzzKey(f)
	env, err := Sign(key, fuzzSeedOffer(id))
	if err != nil {
		f.Fatal(err)
	}
	bid, err := Sign(key, fuzzSeedBid(id))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Add(bid)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		issuer, oid, seq, ok := ClaimedOffer(data)
		o, err := Open[*pb.Offer](data)
		if err != nil {
			return
		}
		h := o.GetHeader()
		if ok && (issuer != peer.ID(h.Issuer) || oid != h.Id || seq != h.Seq) {
			t.Fatalf("claimed %s/%s/%d; the verified header says %s/%s/%d", issuer, oid, seq, peer.ID(h.Issuer), h.Id, h.Seq)
		}
	})
}
