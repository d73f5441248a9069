package doctor

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
)

func TestDoctorReadsTheSwarmsClock(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	daemon := &api.Status{Peers: 5}
	offers := func(ahead ...time.Duration) []api.OfferView {
		var out []api.OfferView
		for _, d := range ahead {
			out = append(out, api.OfferView{Created: now.Add(d)})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		offers []api.OfferView
		want   string
	}{
		{"in step", offers(-time.Minute, -10*time.Second, 2*time.Second), CheckOK},
		{"behind", offers(2*time.Minute, 3*time.Minute, -time.Minute), CheckFail},
		{"one peer ahead", offers(5*time.Minute, -time.Minute, -2*time.Minute), CheckOK},
		{"an empty book with peers", nil, CheckWarn},
	} {
		if c := checkClock(daemon, tc.offers, now); c.Status != tc.want {
			t.Errorf("%s: %+v, want %s", tc.name, c, tc.want)
		}
	}
	if c := checkClock(nil, nil, now); c.Status != CheckSkip {
		t.Errorf("no daemon: %+v", c)
	}
}
