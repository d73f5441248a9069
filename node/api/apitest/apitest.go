// Package apitest is the one conformance suite of api.Node: the same
// checks, run against a node in process (node.Node.API) and through
// api.Client over HTTP, so that the two implementations cannot drift and
// a command written against api.Node means the same through either
// (Kubo runs its coreiface tests so against its node and its HTTP
// client).
//
// apitest owns no state; it imports api, fault and the standard library.
package apitest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
)

// Fixture is the node behind the API under test, and what it holds: a
// renter that sells no GPUs, connected to Provider, with Provider's offer
// in its book, and one lease it rented from Provider, ended.
type Fixture struct {
	API      api.Node
	Self     string         // the node's peer ID
	Provider string         // a provider's peer ID
	Bid      api.BidRequest // a request Provider's offer fits
	Lease    string         // the ended lease's ID
}

// Run runs the suite against f.API, each method in a subtest of its own.
func Run(t *testing.T, f Fixture) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.check(t, context.Background(), f) })
	}
}

// checks are the suite: a check of each method of api.Node, in turn.
var checks = []struct {
	name  string
	check func(*testing.T, context.Context, Fixture)
}{
	{"Status", checkStatus},
	{"Peers", checkPeers},
	{"Offers", checkOffers},
	{"Market", checkMarket},
	{"Match", checkMatch},
	{"PlaceBid", checkPlaceBid},
	{"Attest", checkAttest},
	{"Leases", checkLeases},
	{"CancelLease", checkCancelLease},
	{"NoteExtension", checkNoteExtension},
	{"Receipts", checkReceipts},
	{"Ledger", checkLedger},
	{"Datasets", checkDatasets},
	{"Reputation", checkReputation},
	{"GPUs", checkGPUs},
	{"Rentals", checkRentals},
	{"Redeem", checkRedeem},
	{"Reload", checkReload},
}

func checkReload(t *testing.T, ctx context.Context, f Fixture) {
	res, err := f.API.Reload(ctx)
	if err != nil || len(res.Applied) > 0 {
		t.Errorf("Reload of a renter: %+v, %v; want nothing applied (a renter has no terms to change) and no error", res, err)
	}
}

func checkRedeem(t *testing.T, ctx context.Context, f Fixture) {
	_, err := f.API.Redeem(ctx)
	isKind(t, "Redeem on a node paid by the ledger", err, fault.ErrConflict, "settlement.kind")
}

func checkStatus(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	st, err := a.Status(ctx)
	if err != nil || st.PeerID != f.Self || st.Provider || st.Leases.Ended < 1 {
		t.Errorf("Status: %s, provider %v, %d leases ended, %v; want %s, a renter with a lease ended", st.PeerID, st.Provider, st.Leases.Ended, err, f.Self)
	}
}

func checkPeers(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	ps, err := a.Peers(ctx)
	if err != nil || !slices.ContainsFunc(ps, func(p api.Peer) bool { return p.ID == f.Provider }) {
		t.Errorf("Peers: %d, %v; want the provider among them", len(ps), err)
	}
}

func checkOffers(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	offers, err := a.Offers(ctx, api.OfferQuery{})
	if err != nil || !slices.ContainsFunc(offers, func(o api.OfferView) bool { return o.Provider == f.Provider }) {
		t.Errorf("Offers: %d, %v; want the provider's among them", len(offers), err)
	}
	_, err = a.Offers(ctx, api.OfferQuery{Sort: "colour"})
	isKind(t, "Offers sorted by colour", err, fault.ErrInvalid, "sort")
}

func checkMarket(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	m, err := a.Market(ctx, api.OfferQuery{}, 1)
	if err != nil || m.Offers < 1 || len(m.Cheapest) != 1 {
		t.Errorf("Market: %d offers, %d cheapest, %v; want the provider's offer, 1 cheapest", m.Offers, len(m.Cheapest), err)
	}
	_, err = a.Market(ctx, api.OfferQuery{MaxPrice: "free"}, 1)
	isKind(t, "Market below a price of free", err, fault.ErrInvalid, "max_price")
}

func checkMatch(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	res, err := a.Match(ctx, f.Bid)
	if err != nil || !slices.ContainsFunc(res.Candidates, func(c api.CandidateView) bool { return c.Offer.Provider == f.Provider }) {
		t.Errorf("Match: %d candidates, %v; want the provider's offer", len(res.Candidates), err)
	}
	bad := f.Bid
	bad.Count = 0
	_, err = a.Match(ctx, bad)
	isKind(t, "Match of 0 GPUs", err, fault.ErrInvalid, "count 0")
}

func checkPlaceBid(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	// A quote is a gossiped bid and a stream back: on a loaded
	// machine one may miss its wait, so the suite asks three times.
	req := f.Bid
	req.WaitMillis = 3_000
	var quoted bool
	for try := 0; try < 3 && !quoted; try++ {
		res, err := a.PlaceBid(ctx, req)
		if err != nil {
			t.Fatalf("PlaceBid: %v", err)
		}
		quoted = slices.ContainsFunc(res.Quotes, func(q api.QuoteView) bool { return q.Provider == f.Provider })
	}
	if !quoted {
		t.Error("PlaceBid: no quote from the provider in three bids")
	}
	req.WaitMillis = -1
	_, err := a.PlaceBid(ctx, req)
	isKind(t, "PlaceBid waiting -1 ms", err, fault.ErrInvalid, "wait_ms")
}

func checkAttest(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	_, err := a.Attest(ctx, api.AttestRequest{Peer: "not-a-peer"})
	isKind(t, "Attest of not-a-peer", err, fault.ErrInvalid, "not a peer ID")
}

func checkLeases(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	ls, err := a.Leases(ctx)
	if err != nil || !slices.ContainsFunc(ls, func(l api.LeaseView) bool { return l.ID == f.Lease && l.Ended }) {
		t.Errorf("Leases: %d, %v; want %s among them, ended", len(ls), err, f.Lease)
	}
	l, err := a.Lease(ctx, f.Lease)
	if err != nil || l.ID != f.Lease || l.Role != "renter" || l.Provider != f.Provider {
		t.Errorf("Lease %s: %s as %s from %s, %v", f.Lease, l.ID, l.Role, l.Provider, err)
	}
	_, err = a.Lease(ctx, "lease-none")
	isKind(t, "Lease lease-none", err, fault.ErrNotFound, "lease-none")
}

func checkCancelLease(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	_, err := a.CancelLease(ctx, "lease-none")
	isKind(t, "CancelLease lease-none", err, fault.ErrNotFound, "lease-none")
	_, err = a.CancelLease(ctx, f.Lease)
	isKind(t, "CancelLease of an ended lease", err, fault.ErrConflict, "already ended")
}

func checkNoteExtension(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	_, err := a.NoteExtension(ctx, "lease-none", nil)
	isKind(t, "NoteExtension lease-none", err, fault.ErrNotFound, "lease-none")
	_, err = a.NoteExtension(ctx, f.Lease, []byte("not a protobuf"))
	isKind(t, "NoteExtension of bytes that are no extension", err, fault.ErrInvalid, "extension")
	_, err = a.NoteExtension(ctx, f.Lease, nil)
	isKind(t, "NoteExtension signed by no one", err, fault.ErrInvalid, "extension")
}

func checkReceipts(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	rs, err := a.Receipts(ctx)
	if err != nil || !slices.ContainsFunc(rs, func(r api.ReceiptView) bool { return r.LeaseID == f.Lease && r.Provider == f.Provider }) {
		t.Errorf("Receipts: %d, %v; want the lease's", len(rs), err)
	}
}

func checkLedger(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	es, err := a.Ledger(ctx)
	if err != nil || !slices.ContainsFunc(es, func(e api.LedgerEntry) bool { return e.Peer == f.Provider && e.Receipts >= 1 }) {
		t.Errorf("Ledger: %+v, %v; want the provider's balance", es, err)
	}
}

func checkReputation(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	v, err := a.Reputation(ctx, f.Provider)
	if err != nil || v.Peer != f.Provider {
		t.Errorf("Reputation of the provider: %+v, %v", v, err)
	}
	_, err = a.Reputation(ctx, "not-a-peer")
	isKind(t, "Reputation of not-a-peer", err, fault.ErrInvalid, "not a peer ID")
}

func checkGPUs(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	_, err := a.GPUs(ctx)
	isKind(t, "GPUs of a node that sells none", err, fault.ErrUnavailable, "sells no GPUs")
}

func checkRentals(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	if _, err := a.Rentals(ctx); err != nil {
		t.Errorf("Rentals: %v", err)
	}
	none := api.RentRequest{BidRequest: f.Bid}
	none.Image = ""
	_, err := a.StartRental(ctx, none)
	isKind(t, "StartRental with no image", err, fault.ErrInvalid, "image")
}

// isKind fails t unless err is of kind and says want.
func isKind(t *testing.T, what string, err, kind error, want string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want %q, naming %q", what, err, kind, want)
	}
}

// checkDatasets adds a folder, lists, pins and removes it, and checks the
// kinds of the failures: a relative path, a CID that is none, one not
// kept.
func checkDatasets(t *testing.T, ctx context.Context, f Fixture) {
	a := f.API
	_, err := a.AddDataset(ctx, api.DatasetAdd{Path: "relative/data"})
	isKind(t, "AddDataset of a relative path", err, fault.ErrInvalid, "path")
	_, err = a.AddDataset(ctx, api.DatasetAdd{Path: filepath.Join(t.TempDir(), "none")})
	isKind(t, "AddDataset of a path that is not there", err, fault.ErrInvalid, "none")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := a.AddDataset(ctx, api.DatasetAdd{Path: dir})
	if err != nil || !strings.HasPrefix(d.CID, "bafy") || d.Pinned || d.Blocks != 2 {
		t.Fatalf("AddDataset of a folder of one file: %+v, %v; want a CIDv1 of 2 blocks, cached", d, err)
	}
	ls, err := a.Datasets(ctx)
	if err != nil || !slices.ContainsFunc(ls, func(x api.DatasetView) bool { return x.CID == d.CID }) {
		t.Errorf("Datasets: %+v, %v; want %s among them", ls, err, d.CID)
	}
	if p, err := a.PinDataset(ctx, d.CID, true); err != nil || !p.Pinned {
		t.Errorf("PinDataset: %+v, %v", p, err)
	}
	_, err = a.PinDataset(ctx, "not-a-cid", true)
	isKind(t, "PinDataset of no CID", err, fault.ErrInvalid, "cid")
	if r, err := a.RemoveDataset(ctx, d.CID); err != nil || r.CID != d.CID {
		t.Errorf("RemoveDataset: %+v, %v", r, err)
	}
	_, err = a.RemoveDataset(ctx, d.CID)
	isKind(t, "RemoveDataset of one removed", err, fault.ErrNotFound, d.CID)
}
