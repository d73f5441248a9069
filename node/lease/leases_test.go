package lease

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
)

// A lease refused for capacity is told a later start only when that start
// comes from bronze leases having had their notice; GPUs that are merely
// busy with a silver lease for a while are a plain refusal (a renter told
// to start minutes later would sit waiting for its job).
func TestRefusalOffersALaterStartOnlyAfterBronzeNotice(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	notice := 2 * time.Minute
	for _, c := range []struct {
		name    string
		holder  pb.Tier
		holds   time.Duration
		wantDue time.Time
	}{
		{"busy with a bronze lease", pb.Tier_TIER_BRONZE, time.Hour, now.Add(notice + time.Second)},
		{"busy with a silver lease that ends before the notice would", pb.Tier_TIER_SILVER, time.Minute, time.Time{}},
		{"busy with a silver lease for longer", pb.Tier_TIER_SILVER, time.Hour, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cal, err := market.NewCalendar([]string{"g0", "g1"}, market.Availability{}, notice)
			if err != nil {
				t.Fatal(err)
			}
			held := market.LeaseRequest{ID: "held", GPUs: 2, Start: now, Duration: c.holds, Tier: c.holder, PriceMicros: 1_000_000}
			d, err := cal.Admit(held, now)
			if err == nil {
				_, err = cal.Commit(held, d, now)
			}
			if err != nil {
				t.Fatal(err)
			}
			lo := &Owner{notice: notice}
			r := market.LeaseRequest{ID: "new", GPUs: 2, Start: now, Duration: time.Hour, Tier: pb.Tier_TIER_SILVER, PriceMicros: 1_000_000}
			_, err = cal.Admit(r, now)
			if err == nil {
				t.Fatal("admitted onto busy GPUs")
			}
			rej := lo.refusal(cal, r, err, now)
			if rej.Code != pb.RejectCode_REJECT_NO_CAPACITY || !rej.EarliestStart.Equal(c.wantDue) {
				t.Errorf("refusal %v, earliest start %v; want NO_CAPACITY, %v", rej.Code, rej.EarliestStart, c.wantDue)
			}
		})
	}
}
