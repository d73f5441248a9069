package market

import (
	"testing"

	"github.com/idlegrid/idlegrid/market/pb"
)

func TestParsePrice(t *testing.T) {
	for in, want := range map[string]uint64{"2": 2_000_000, "2.1": 2_100_000, "2.10": 2_100_000, "0.000001": 1, "10000": 10_000_000_000} {
		if got, err := ParsePrice(in); err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".5", "-1", "1.2345678", "1,5", "abc", "1e3", "99999999999999999999"} {
		if _, err := ParsePrice(in); err == nil {
			t.Errorf("ParsePrice(%q) accepted", in)
		}
	}
}

func TestFormatPrice(t *testing.T) {
	for micros, want := range map[uint64]string{2_100_000: "2.10", 1: "0.000001", 0: "0.00", 1_234_500: "1.2345"} {
		if got := FormatPrice(micros); got != want {
			t.Errorf("FormatPrice(%d) = %s, want %s", micros, got, want)
		}
	}
}

func TestPricesAndTiersGoBothWays(t *testing.T) {
	for _, micros := range []uint64{0, 1, 2_000_000, 2_100_000, 1_234_500, 10_000_000_000} {
		if got, err := ParsePrice(FormatPrice(micros)); err != nil || got != micros {
			t.Errorf("ParsePrice(FormatPrice(%d)) = %d, %v", micros, got, err)
		}
	}
	for _, tier := range []pb.Tier{pb.Tier_TIER_GOLD, pb.Tier_TIER_SILVER, pb.Tier_TIER_BRONZE} {
		if got, err := TierFromName(TierName(tier)); err != nil || got != tier {
			t.Errorf("TierFromName(TierName(%v)) = %v, %v", tier, got, err)
		}
	}
	if _, err := TierFromName(TierName(pb.Tier_TIER_UNSPECIFIED)); err == nil {
		t.Error("TierFromName(\"unspecified\") accepted")
	}
}
