package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/views"
)

// Fresh keys cannot book a provider's calendar ahead (issue 26, attack 8:
// 7 fresh keys booked all 8 GPUs for each of the next 7 days, the cap per
// renter counting per key; an honest rental got REJECT_NO_CAPACITY and
// status showed "57 of 8 GPUs leased (712%)"). Renters with no history
// booking ahead hold together at most new_renter_share (0.5) of the GPUs
// at any instant more than 2 hours ahead, and of a day's GPU-hours: a
// fresh renter still gets GPUs now (use, which it must attend), a renter
// with a receipt books ahead past the squatters, and status counts the
// GPUs leased now, never more than exist, and the rest as booked.
func TestFreshKeysCannotBookTheCalendarAhead(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, known := leaseSwarm(t, nil)
	// The known renter earns its history: a lease run to its receipt.
	if res, err := known.Rent(context.Background(), rentRequest(image, "true"), RentOutput{}); err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("rent: %v (%+v)", err, res.Receipt)
	}
	waitFor(t, 15*time.Second, "the provider trusts the renter it served", func() bool { return prov.reputation.Scores().Of(known.id).Trust > 0 })

	now := time.Now()
	lease := func(gpus uint32, start time.Time, hours int) func(*pb.Lease) {
		return func(l *pb.Lease) {
			l.GpuCount, l.Bid.Gpu.Count = gpus, gpus
			l.StartUnixMs, l.Bid.LatestStartUnixMs = start.UnixMilli(), start.UnixMilli()
			l.DurationSeconds, l.Bid.DurationSeconds = uint64(hours*3600), uint64(hours*3600)
		}
	}
	var heldAhead time.Duration // the squatters' GPU time more than 2 h ahead
	for day := range 7 {
		squatter := startNode(t, testRepo(t, fmt.Sprintf("squatter%d", day), bootstrapFrom(prov)), Options{Light: true})
		waitFor(t, 15*time.Second, "the provider's offer in the squatter's book", func() bool { return offeredGPUs(squatter, prov) == 8 })
		// Past the near horizon: a lease that starts sooner and is not
		// attended ends within jobs.renter_grace.
		start := now.Add(3*time.Hour + time.Duration(day)*24*time.Hour)
		for _, gpus := range []uint32{8, 4, 2, 1} {
			r := proposeRaw(t, squatter, prov, lease(gpus, start, 24))
			switch {
			case r.Lease != nil:
				heldAhead += time.Duration(gpus) * 24 * time.Hour
			case r.Code != pb.RejectCode_REJECT_RENTER_LIMIT && r.Code != pb.RejectCode_REJECT_NO_CAPACITY:
				t.Errorf("squatter %d, %d GPUs: %v %q", day, gpus, r.Code, r.Reason)
			}
		}
	}
	if limit := 4 * 24 * time.Hour; heldAhead > limit {
		t.Errorf("fresh keys hold %.1f GPU-hours more than 2 h ahead; they may hold %.1f together", heldAhead.Hours(), limit.Hours())
	}

	fresh := startNode(t, testRepo(t, "fresh", bootstrapFrom(prov)), Options{Light: true})
	waitFor(t, 15*time.Second, "the provider's offer in the fresh renter's book", func() bool { return offeredGPUs(fresh, prov) == 8 })
	if r := proposeRaw(t, fresh, prov, lease(4, time.Now(), 24)); r.Lease == nil {
		t.Errorf("a fresh renter's 4 GPUs from now for a day (use, not a hold): %v %q", r.Code, r.Reason)
	}
	if r := proposeRaw(t, known, prov, lease(4, now.Add(75*time.Hour), 24)); r.Lease == nil {
		t.Errorf("the known renter's 4 GPUs on day 4: %v %q", r.Code, r.Reason)
	}
	r := proposeRaw(t, fresh, prov, lease(1, now.Add(99*time.Hour), 24))
	if r.Lease != nil || r.Code != pb.RejectCode_REJECT_RENTER_LIMIT || !strings.Contains(r.Reason, "has no history here") {
		t.Errorf("the fresh renter's GPU on day 5: %v %q; want REJECT_RENTER_LIMIT", r.Code, r.Reason)
	}

	sum := prov.Status().Leases
	if sum.GPUsLeased > sum.GPUsOffered || sum.Utilisation > 1 {
		t.Errorf("status: %d of %d GPUs leased (%.0f%%)", sum.GPUsLeased, sum.GPUsOffered, 100*sum.Utilisation)
	}
	if sum.GPUsBooked < 4 {
		t.Errorf("status: %d GPUs booked ahead; the known renter alone booked 4", sum.GPUsBooked)
	}
}
