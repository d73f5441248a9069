package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
)

// Bounds of the rentals a node runs for its API (the dashboard's).
const (
	// maxRentalsRunning bounds those running at once; maxRentalsKept how
	// many, ended or not, the node lists; rentalSteps the progress lines
	// each keeps.
	maxRentalsRunning = 4
	maxRentalsKept    = 32
	rentalSteps       = 50
)

// rentals are the rentals started through the API: each runs as
// 'idlegrid rent --detach' would, but followed by this node to its
// receipt, its output kept under logs/ as every rental's is. Its mutex
// guards the views alone, written by the rentals' progress and read by
// the API; no I/O happens under it.
type rentals struct {
	mu   sync.Mutex
	list []*api.RentalView // newest last
}

// StartRental starts a rental of req that this node runs and follows to
// its end; it returns at once, the rental "renting". What only a
// terminal's rent can do (uploads, downloads, an image from this
// machine's engine, micro-pools, detaching) is refused.
func (n *Node) StartRental(req api.RentRequest) (api.RentalView, error) {
	for _, c := range []struct {
		set   bool
		field string
	}{{len(req.Uploads) > 0, "uploads"}, {len(req.Downloads) > 0, "downloads"}, {req.ImageFromDocker != "", "image_from_docker"},
		{req.MaxPairRTTMillis > 0, "max_pair_rtt_ms"}, {req.Detach, "detach"}} {
		if c.set {
			return api.RentalView{}, fault.Invalidf("%s: a rental through the API cannot have it: rent with 'idlegrid rent'", c.field)
		}
	}
	if req.Image == "" {
		return api.RentalView{}, fault.Invalid(errors.New("image: name the container image to run"))
	}
	var idb [8]byte
	rand.Read(idb[:])
	v := &api.RentalView{ID: hex.EncodeToString(idb[:]), Started: n.clock.Now().UTC(), State: "renting", Progress: []string{}}
	rs := &n.rentals
	rs.mu.Lock()
	running := 0
	for _, r := range rs.list {
		if r.State == "renting" || r.State == "running" {
			running++
		}
	}
	if running >= maxRentalsRunning {
		rs.mu.Unlock()
		return api.RentalView{}, fmt.Errorf("%d rentals are running already; wait for one to end", running)
	}
	rs.list = append(rs.list, v)
	if len(rs.list) > maxRentalsKept {
		for i, r := range rs.list {
			if r.State == "ended" || r.State == "failed" {
				rs.list = slices.Delete(rs.list, i, i+1)
				break
			}
		}
	}
	out := *v
	rs.mu.Unlock()
	edit := func(f func(v *api.RentalView)) {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		f(v)
	}
	go func() {
		res, err := n.Rent(n.base, req, RentOutput{
			Progress: func(line string) {
				edit(func(v *api.RentalView) {
					v.Progress = append(v.Progress, line)
					if len(v.Progress) > rentalSteps {
						v.Progress = slices.Delete(v.Progress, 0, len(v.Progress)-rentalSteps)
					}
				})
			},
			Status: func(line string) { edit(func(v *api.RentalView) { v.Status = line }) },
			Leased: func(id string) { edit(func(v *api.RentalView) { v.State, v.Lease, v.Status = "running", id, "" }) },
		})
		edit(func(v *api.RentalView) {
			v.Result, v.Status = &res, ""
			if v.State, v.Error = "ended", ""; err != nil {
				v.State, v.Error = "failed", err.Error()
			}
		})
	}()
	return out, nil
}

// Rentals lists the rentals started through the API, newest first.
func (n *Node) Rentals() []api.RentalView {
	rs := &n.rentals
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]api.RentalView, 0, len(rs.list))
	for i := len(rs.list) - 1; i >= 0; i-- {
		v := *rs.list[i]
		v.Progress = slices.Clone(v.Progress)
		out = append(out, v)
	}
	return out
}
