package market

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

func leaseParties(t testing.TB) (rk, pk crypto.PrivKey, renter, provider peer.ID) {
	rk, renter = fuzzKey(t)
	pk, _, err := crypto.GenerateEd25519Key(&seededReader{b: 7})
	if err != nil {
		t.Fatal(err)
	}
	provider, _ = peer.IDFromPrivateKey(pk)
	return rk, pk, renter, provider
}

func sampleLease(renter, provider peer.ID) *pb.Lease {
	b := fuzzSeedBid(renter)
	b.Image = "idlegrid-test/busybox:1"
	return &pb.Lease{
		Version: Version, Id: "lease-1", Renter: []byte(renter), Provider: []byte(provider), OfferId: "gpus", OfferSeq: 4,
		Bid: b, Tier: b.Tier, GpuCount: 2, StartUnixMs: 1_700_000_000_000, DurationSeconds: b.DurationSeconds,
		Currency: b.Currency, PriceMicros: b.MaxPriceMicros, CreatedUnixMs: 1_700_000_000_000,
		Workload: &pb.Workload{Image: b.Image, Command: []string{"echo", "hi"}, Env: []string{"A=1"}, WorkloadClass: b.WorkloadClass},
	}
}

func TestLeaseCoSigning(t *testing.T) {
	rk, pk, renter, provider := leaseParties(t)
	l := sampleLease(renter, provider)
	if err := DefaultLimits().ValidateLease(l); err != nil {
		t.Fatal(err)
	}
	cs, err := NewCoSigned(rk, Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCoSigned[*pb.Lease](cs, Renter, Provider); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("a proposal passed for a countersigned lease: %v", err)
	}
	if err := CoSign[*pb.Lease](pk, Provider, cs); err != nil {
		t.Fatal(err)
	}
	got, err := OpenCoSigned[*pb.Lease](cs, Renter, Provider)
	if err != nil || !proto.Equal(got, l) {
		t.Fatalf("countersigned lease: %v, %v", got, err)
	}

	// The provider cannot sign as the renter, nor anyone as the provider.
	if err := CoSign[*pb.Lease](pk, Renter, proto.Clone(cs).(*pb.CoSigned)); !errors.Is(err, ErrCoSigner) {
		t.Errorf("provider's key as the renter: %v", err)
	}
	// Changed terms break both signatures.
	tampered := proto.Clone(cs).(*pb.CoSigned)
	l2 := proto.Clone(l).(*pb.Lease)
	l2.PriceMicros--
	tampered.Body, _ = proto.MarshalOptions{Deterministic: true}.Marshal(l2)
	if _, err := OpenCoSigned[*pb.Lease](tampered); !errors.Is(err, ErrCoSignature) {
		t.Errorf("changed price: %v", err)
	}
	// A lease signature is not a receipt signature.
	r := &pb.Receipt{Version: Version, LeaseId: l.Id, Renter: l.Renter, Provider: l.Provider}
	rb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	asReceipt := &pb.CoSigned{Body: rb, RenterSignature: cs.RenterSignature}
	if _, err := OpenCoSigned[*pb.Receipt](asReceipt); !errors.Is(err, ErrCoSignature) {
		t.Errorf("lease signature over a receipt: %v", err)
	}
	if _, err := OpenCoSigned[*pb.Lease](&pb.CoSigned{Body: make([]byte, MaxCoSignedSize+1)}); err == nil {
		t.Error("an oversized body was opened")
	}
}

// A lease's term is co-signed beside it, by the same two signatures'
// makers: a record shows the term both signed without the lease's
// workload. A provider refuses to countersign a lease whose term the
// renter left out or made other than the lease's.
func TestALeasesTermIsCoSignedBesideIt(t *testing.T) {
	rk, pk, renter, provider := leaseParties(t)
	l := sampleLease(renter, provider)
	cs, err := NewCoSigned(rk, Renter, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SignedTerm(cs); !errors.Is(err, ErrUnsigned) {
		t.Errorf("the term of a lease only its renter signed: %v", err)
	}
	proposal := proto.Clone(cs).(*pb.CoSigned)
	if err := CoSign[*pb.Lease](pk, Provider, cs); err != nil {
		t.Fatal(err)
	}
	term, err := SignedTerm(cs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenCoSigned[*pb.Term](term, Renter, Provider)
	if err != nil || got.StartUnixMs != l.StartUnixMs || got.DurationSeconds != l.DurationSeconds || string(got.LeaseHash) != string(BodyHash(cs)) {
		t.Errorf("the term: %v (%v)", got, err)
	}
	if term.Body == nil || strings.Contains(string(term.Body), "echo") {
		t.Error("the term carries the lease's workload")
	}

	noTerm := proto.Clone(proposal).(*pb.CoSigned)
	noTerm.Term = nil
	if err := CoSign[*pb.Lease](pk, Provider, noTerm); !errors.Is(err, ErrInvalid) {
		t.Errorf("countersigning a lease whose renter signed no term: %v", err)
	}
	longer := proto.Clone(proposal).(*pb.CoSigned)
	lt := TermOf(l, proposal)
	lt.DurationSeconds *= 10
	longer.Term, err = NewCoSigned(rk, Renter, lt)
	if err != nil {
		t.Fatal(err)
	}
	if err := CoSign[*pb.Lease](pk, Provider, longer); !errors.Is(err, ErrInvalid) {
		t.Errorf("countersigning a lease whose term the renter made ten times longer: %v", err)
	}
	if _, err := SignedTerm(longer); err == nil {
		t.Error("a term other than the lease's passed as its term")
	}
}

func TestValidateLease(t *testing.T) {
	_, _, renter, provider := leaseParties(t)
	for _, c := range []struct {
		field string
		edit  func(*pb.Lease)
	}{
		{"version", func(l *pb.Lease) { l.Version = 9 }},
		{"id", func(l *pb.Lease) { l.Id = "no spaces" }},
		{"id", func(l *pb.Lease) { l.Id = ".." }},
		{"offer_id", func(l *pb.Lease) { l.OfferId = "." }},
		{"renter", func(l *pb.Lease) { l.Renter = []byte("x") }},
		{"provider", func(l *pb.Lease) { l.Provider = l.Renter }},
		{"offer_id", func(l *pb.Lease) { l.OfferId = "" }},
		{"bid", func(l *pb.Lease) { l.Bid = nil }},
		{"bid.header.swarm", func(l *pb.Lease) { l.Bid.Header.Swarm = "lab-01234567" }},
		{"tier", func(l *pb.Lease) { l.Tier = pb.Tier_TIER_GOLD; l.Bid.Tier = pb.Tier_TIER_SILVER }},
		{"gpu_count", func(l *pb.Lease) { l.GpuCount = l.Bid.Gpu.Count + 1 }},
		{"start_unix_ms", func(l *pb.Lease) { l.StartUnixMs = 0 }},
		{"duration_seconds", func(l *pb.Lease) { l.DurationSeconds++ }},
		{"price_micros", func(l *pb.Lease) { l.PriceMicros = l.Bid.MaxPriceMicros + 1 }},
		{"currency", func(l *pb.Lease) { l.Currency = "EUR" }},
		{"workload.image", func(l *pb.Lease) { l.Workload.Image = "other:1" }},
		{"workload.workload_class", func(l *pb.Lease) { l.Workload.WorkloadClass = "mining" }},
		{"workload.env[0]", func(l *pb.Lease) { l.Workload.Env = []string{"=novalue"} }},
	} {
		l := sampleLease(renter, provider)
		c.edit(l)
		var fe *FieldError
		if err := DefaultLimits().ValidateLease(l); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v", c.field, err)
		}
	}
}

func TestMeter(t *testing.T) {
	_, _, renter, provider := leaseParties(t)
	l := sampleLease(renter, provider)
	l.PriceMicros, l.GpuCount, l.DurationSeconds = 3_600_000, 2, 600 // $3.60 per GPU-hour on 2 GPUs: 2000 micros a second
	start := time.UnixMilli(l.StartUnixMs)
	for _, c := range []struct {
		last        time.Time
		secs, total uint64
	}{
		{start.Add(-time.Second), 0, 0},
		{start, 0, 0},
		{start.Add(90*time.Second + 900*time.Millisecond), 90, 180_000},
		{start.Add(time.Hour), 600, 1_200_000},
	} {
		if s, a := Meter(l, c.last); s != c.secs || a != c.total {
			t.Errorf("Meter at %s: %d s, %d micros; want %d, %d", c.last.Sub(start), s, a, c.secs, c.total)
		}
	}
}

func FuzzOpenCoSigned(f *testing.F) {
	rk, pk, renter, provider := leaseParties(f)
	cs, _ := NewCoSigned(rk, Renter, sampleLease(renter, provider))
	CoSign[*pb.Lease](pk, Provider, cs)
	f.Add(cs.Body, cs.RenterSignature, cs.ProviderSignature)
	f.Add([]byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, body, rs, ps []byte) {
		in := &pb.CoSigned{Body: body, RenterSignature: rs, ProviderSignature: ps}
		l, err := OpenCoSigned[*pb.Lease](in, Renter, Provider)
		if err != nil {
			return
		}
		// Whatever opens was signed by both parties it names.
		if _, err := OpenCoSigned[*pb.Lease](&pb.CoSigned{Body: body, RenterSignature: rs}, Renter); err != nil {
			t.Fatalf("opened with both, not with the renter's alone: %v", err)
		}
		DefaultLimits().ValidateLease(l)
	})
}
