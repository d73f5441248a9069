package node

import (
	"context"
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/api/apitest"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/views"
)

// The node in process and api.Client over HTTP are one interface: the
// same suite, against a renter that rented once, holds for both.
func TestTheAPIIsTheSameInProcessAndOverHTTP(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	req := rentRequest(image, "true")
	res, err := renter.Rent(context.Background(), req, RentOutput{})
	if err != nil || res.Receipt.Outcome != views.LeaseCompleted {
		t.Fatalf("the fixture's rental: %v (%s)", err, res.Receipt.Outcome)
	}
	f := apitest.Fixture{Self: renter.id.String(), Provider: prov.id.String(), Bid: req.BidRequest, Lease: res.Lease.ID}
	for _, impl := range []struct {
		name string
		api  api.Node
	}{
		{"in process", renter.API()},
		{"over HTTP", api.NewClient(renter.APIAddr(), apiToken(t, renter))},
	} {
		t.Run(impl.name, func(t *testing.T) {
			f := f
			f.API = impl.api
			apitest.Run(t, f)
		})
	}
}
