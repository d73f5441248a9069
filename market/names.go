package market

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/idlegrid/idlegrid/market/pb"
)

// Names and figures that go both ways, each reader beside its writer.

// TierName is the lower-case name of a tier: gold, silver or bronze.
func TierName(t pb.Tier) string {
	switch t {
	case pb.Tier_TIER_GOLD:
		return "gold"
	case pb.Tier_TIER_SILVER:
		return "silver"
	case pb.Tier_TIER_BRONZE:
		return "bronze"
	}
	return "unspecified"
}

// TierFromName maps gold, silver and bronze to wire tiers.
func TierFromName(s string) (pb.Tier, error) {
	switch s {
	case "gold":
		return pb.Tier_TIER_GOLD, nil
	case "silver":
		return pb.Tier_TIER_SILVER, nil
	case "bronze":
		return pb.Tier_TIER_BRONZE, nil
	}
	return 0, fmt.Errorf("tier %q: want gold, silver or bronze", s)
}

// FormatPrice writes micro-units as a decimal with two to six places:
// 2.00, 1.50, 0.000125.
func FormatPrice(micros uint64) string {
	s := fmt.Sprintf("%d.%06d", micros/1_000_000, micros%1_000_000)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	return s
}

// ParsePrice reads a decimal price such as "2.10" as micro-units.
func ParsePrice(s string) (uint64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" || len(frac) > 6 {
		return 0, fmt.Errorf("%q is not a decimal with at most 6 places", s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || w > math.MaxUint64/1_000_000-1 {
		return 0, fmt.Errorf("%q is not a decimal with at most 6 places", s)
	}
	f := uint64(0)
	if frac != "" {
		f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a decimal with at most 6 places", s)
		}
	}
	return w*1_000_000 + f, nil
}
