package node

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// A completed rental raises the provider in its renter's view and the
// renter in its provider's, on receipts both signed; the scores rest on
// the stored records, so a restarted renter ranks the same; and the
// matcher weighs them (issue 12).
func TestACompletedLeaseRaisesBothPartiesAndSurvivesARestart(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	prior := reputation.DefaultConfig().Prior
	if v, err := renter.Reputation(prov.id.String()); err != nil || v.Reliability != prior || v.Basis != "0.60: no history" || len(v.Path) != 0 {
		t.Fatalf("before any lease: %+v, %v", v, err)
	}
	res, err := renter.Rent(context.Background(), rentRequest(image, "true"), RentOutput{})
	if err != nil || res.Receipt.Outcome != LeaseCompleted {
		t.Fatalf("rent: %v (%+v)", err, res.Receipt)
	}
	var after float64
	waitFor(t, 10*time.Second, "the renter counts the receipt", func() bool {
		v, err := renter.Reputation(prov.id.String())
		after = v.Reliability
		return err == nil && v.Receipts == 1 && v.Trusted == 1 && v.Reliability > prior && len(v.Path) == 2
	})
	if renter.reputation.Reliability(prov.id) != after {
		t.Errorf("the matcher's source says %.3f, the API %.3f", renter.reputation.Reliability(prov.id), after)
	}
	waitFor(t, 10*time.Second, "the provider counts the renter", func() bool {
		v, err := prov.Reputation(renter.id.String())
		return err == nil && v.AsRenter > prior
	})
	offers, err := renter.Offers(api.OfferQuery{})
	if err != nil || len(offers) != 1 || offers[0].Reliability != after || !strings.Contains(offers[0].Basis, "1 receipts, 1 via trusted peers") {
		t.Errorf("offers: %+v, %v", offers, err)
	}

	repo := renter.repo
	renter.Close()
	renter = startNode(t, repo, Options{Light: true})
	waitFor(t, 10*time.Second, "the restarted renter ranks the provider as before", func() bool {
		v, err := renter.Reputation(prov.id.String())
		return err == nil && math.Abs(v.Reliability-after) < 1e-6 // what a few seconds of decay take
	})
	if _, err := renter.Reputation("not-a-peer"); err == nil || !strings.Contains(err.Error(), `peer "not-a-peer"`) {
		t.Errorf("a malformed peer ID: %v", err)
	}
}
