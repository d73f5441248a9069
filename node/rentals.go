package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
)

// The renter's types and errors that node's own API (Rent, Attach) hands
// out, under node's name.
type (
	RentOutput      = renter.RentOutput
	NoProviderError = renter.NoProviderError
	Attempt         = renter.Attempt
)

// Errors of a rental (package renter).
var (
	ErrNoProvider    = renter.ErrNoProvider
	ErrNotAttestable = renter.ErrNotAttestable
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

// Match ranks the offers in this node's book for a bid, without
// publishing anything; when nothing fits it explains why.
func (n *Node) Match(ctx context.Context, req api.BidRequest) (api.MatchResult, error) {
	now := n.clock.Now()
	snap := n.market.Snapshot()
	needs, err := renter.Needs(ctx, renterDatasets{n.datasetAPI.data}, req.Datasets)
	if err != nil {
		return api.MatchResult{}, err
	}
	b, err := renter.BuildBid(req, n.id, n.swarm, now, n.pays(), snap, needs)
	if err != nil {
		return api.MatchResult{}, err
	}
	limit := req.Limit
	if limit <= 0 {
		limit = renter.DefaultLimit
	}
	mt := n.market.MatcherFor(req)
	field, desc, _ := renter.SortField(req.Sort) // BuildBid refused a bad one
	var res market.Result
	if field == "" {
		res = mt.Match(snap, b, now, limit)
	} else { // every offer that fits, by the field
		res = mt.Match(snap, b, now, 0)
		market.SortCandidates(res.Candidates, field, desc)
		res.Candidates = res.Candidates[:min(len(res.Candidates), limit)]
	}
	out := api.MatchResult{Considered: res.Considered, Feasible: res.Feasible, Candidates: []api.CandidateView{}}
	scores := n.reputation.Scores()
	for i, c := range res.Candidates {
		out.Candidates = append(out.Candidates, views.Candidate(i+1, c, scores))
	}
	// The walk stops once no cheaper offer can enter the list, so its
	// counts are of what it saw; Explain reads the whole book, which a
	// quote with matches pays for only when asked.
	if len(res.Candidates) == 0 || req.Explain {
		views.Explained(&out, mt.Explain(snap, b, now))
	}
	return out, nil
}

// PlaceBid signs and gossips a bid, then collects the quotes providers
// send back for req.WaitMillis (default 3 s).
func (n *Node) PlaceBid(ctx context.Context, req api.BidRequest) (api.BidResult, error) {
	wait := time.Duration(req.WaitMillis) * time.Millisecond
	if wait <= 0 {
		wait = renter.DefaultBidWait
	}
	if wait > renter.MaxBidWait {
		return api.BidResult{}, fault.Fieldf("wait_ms", req.WaitMillis, "at most %d", renter.MaxBidWait.Milliseconds())
	}
	if req.Where != "" || req.Sort != "" {
		return api.BidResult{}, fault.Invalidf("where %q, sort %q: a gossiped bid carries no query, and providers quote on its terms alone; quote and rent hold this node's book to one", req.Where, req.Sort)
	}
	start := n.clock.Now()
	needs, err := renter.Needs(ctx, renterDatasets{n.datasetAPI.data}, req.Datasets)
	if err != nil {
		return api.BidResult{}, err
	}
	b, err := renter.BuildBid(req, n.id, n.swarm, start, n.pays(), n.market.Snapshot(), needs)
	if err != nil {
		return api.BidResult{}, err
	}
	env, err := market.Sign(n.key, b)
	if err != nil {
		return api.BidResult{}, err
	}
	if err := n.market.PlaceBid(ctx, b); err != nil {
		return api.BidResult{}, err
	}
	quotes, err := n.collectQuotes(ctx, b, env, start.Add(wait))
	if err != nil {
		return api.BidResult{}, err
	}
	out := api.BidResult{BidID: b.Header.Id, Quotes: []api.QuoteView{}}
	for _, q := range quotes {
		out.Quotes = append(out.Quotes, views.Quote(q))
	}
	return out, nil
}

// collectQuotes publishes the registered bid b once the bids topic has a
// mesh, and takes the quotes that came back by until.
func (n *Node) collectQuotes(ctx context.Context, b *pb.Bid, env []byte, until time.Time) ([]*pb.Quote, error) {
	n.link.AwaitMesh(ctx, p2p.TopicBids, n.clock.Until(until))
	err := n.link.Publish(ctx, p2p.TopicBids, env)
	if err == nil {
		select {
		case <-n.clock.After(n.clock.Until(until)):
		case <-ctx.Done():
			err = ctx.Err()
		}
	} else {
		err = fmt.Errorf("publish bid: %w", err)
	}
	quotes, qerr := n.market.TakeQuotes(context.WithoutCancel(ctx), b.Header.Id)
	return quotes, cmp.Or(err, qerr)
}

// Rent does the whole rental: it gathers offers until some fit, ranks
// them, challenges the best provider's attestation, proposes a lease and
// moves on to the next candidate on a refusal; then it follows the job,
// streaming its output, verifying its telemetry, and countersigns the
// receipt when it agrees with what it verified. Cancelling ctx cancels
// the lease and still waits for the receipt. A node closing meanwhile
// returns ErrClosed and leaves the lease running: the node follows it
// again when it restarts. When no provider takes the lease the error is
// a *NoProviderError.
func (n *Node) Rent(ctx context.Context, req api.RentRequest, out RentOutput) (api.RentResult, error) {
	if n.renter == nil {
		return api.RentResult{Tried: []api.Attempt{}}, ErrClosed
	}
	return n.renter.Rent(ctx, req, out)
}

// Attach follows a lease this node rented and has not seen end (one left
// running by rent's Detach, or by a rent that was killed) from where its
// kept output ends, as Rent does; the end of ctx leaves the lease running.
func (n *Node) Attach(ctx context.Context, id string, out RentOutput) (api.RentResult, error) {
	if n.renter == nil {
		return api.RentResult{Tried: []api.Attempt{}}, ErrClosed
	}
	n.knowProvider(ctx, id)
	return n.renter.Attach(ctx, id, out)
}

// SettleNow tries once, now, to settle each lease this node rented that
// is settling (its provider was gone), and to close each it holds open
// that its provider has ended, and waits for the attempts: the two sides
// then keep one receipt both signed.
func (n *Node) SettleNow(ctx context.Context) {
	if n.renter == nil {
		return
	}
	if recs, err := n.leaseStore().All(ctx); err == nil {
		for _, rec := range recs {
			if rec.Role == records.Renter && !records.Ended(rec.State) {
				n.knowProvider(ctx, rec.ID)
			}
		}
	}
	n.renter.SettleNow(ctx)
}

// knowProvider adds to the peerstore where this node's rental id last
// reached its provider (the rental's provider note): a light node started
// for one command knows no one yet, and its DHT table may be empty.
func (n *Node) knowProvider(ctx context.Context, id string) {
	rec, err := n.leaseStore().Get(ctx, id)
	if err != nil || rec.Role != records.Renter {
		return
	}
	l, _, err := rec.Open()
	if err != nil {
		return
	}
	if ai, err := renter.ReadProviderNote(filepath.Join(n.repo.Path, repo.LogsDir), id); err == nil && ai.ID == peer.ID(l.Provider) {
		n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
	}
}
