package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Node is one node's API: everything the CLI and the dashboard ask of a
// node. The node implements it in process (node.Node.API), and Client
// over HTTP; package apitest runs one suite against both, so a command is
// written once, against Node. Every method takes a context first, and a
// failure that is the request's is of a kind of package fault (invalid,
// not found, conflict, unavailable), in process and over HTTP alike.
type Node interface {
	Records
	Status(context.Context) (Status, error)
	Peers(context.Context) ([]Peer, error)
	// Offers lists the offers in the node's book that q selects.
	Offers(context.Context, OfferQuery) ([]OfferView, error)
	// Market sums up the offers q selects, listing the cheapest limit.
	Market(ctx context.Context, q OfferQuery, limit int) (MarketSummary, error)
	Match(context.Context, BidRequest) (MatchResult, error)
	PlaceBid(context.Context, BidRequest) (BidResult, error)
	Attest(context.Context, AttestRequest) (AttestResult, error)
	CancelLease(ctx context.Context, id string) (LeaseView, error)
	Reputation(ctx context.Context, peer string) (ReputationView, error)
	// Lease is one of this node's leases.
	Lease(ctx context.Context, id string) (LeaseView, error)
	// GPUs reads a provider's GPUs now.
	GPUs(context.Context) (GPUsStatus, error)
	// StartRental starts a rental the node runs and follows itself (ctx
	// bounds the asking, not the rental); Rentals lists those started,
	// newest first.
	StartRental(context.Context, RentRequest) (RentalView, error)
	Rentals(context.Context) ([]RentalView, error)
	// Redeem redeems now, on a provider paid by channel, the latest
	// voucher of each channel that pays more than the chain has.
	Redeem(context.Context) (RedeemResult, error)
	// Reload takes on the repository's config.toml as it is now, as
	// SIGHUP does, and says which changed settings apply now and which
	// wait for a restart.
	Reload(context.Context) (ReloadResult, error)
}

// Records is the part of Node that a repository answers by itself, with
// no daemon running (node.Records).
type Records interface {
	Leases(context.Context) ([]LeaseView, error)
	Receipts(context.Context) ([]ReceiptView, error)
	Ledger(context.Context) ([]LedgerEntry, error)
	// NoteExtension records in a lease's record an extension both its
	// parties signed (protobuf CoSigned), when it is later than the
	// record's: `idlegrid extend` reaches the provider by itself, and the
	// renter's record must then say the term it extended to.
	NoteExtension(ctx context.Context, id string, extension []byte) (LeaseView, error)
	// AddDataset imports a file or folder of the node's machine as a
	// dataset, named by its CID; Datasets lists those kept, least
	// recently used first; PinDataset pins or unpins one; RemoveDataset
	// removes one no lease uses, and returns what it was.
	AddDataset(context.Context, DatasetAdd) (DatasetView, error)
	Datasets(context.Context) ([]DatasetView, error)
	PinDataset(ctx context.Context, cid string, pin bool) (DatasetView, error)
	RemoveDataset(ctx context.Context, cid string) (DatasetView, error)
}

// Backend is what the server serves: a Node, and where the files of a
// lease's output are, which its output stream reads.
type Backend interface {
	Node
	// LeaseLogs names the files a renter keeps a lease's output in.
	LeaseLogs(ctx context.Context, id string) (LeaseLogs, error)
}

// statuses is the one table from a kind of failure (package fault) to
// the status the API answers it with; Client reads a status back into its
// kind. An error of no kind is the node's own: 500, unless the handler
// says otherwise.
var statuses = []struct {
	kind error
	code int
}{
	{fault.ErrInvalid, http.StatusBadRequest},
	{fault.ErrNotFound, http.StatusNotFound},
	{fault.ErrConflict, http.StatusConflict},
	{fault.ErrUnavailable, http.StatusServiceUnavailable},
}

// statusOf is the status err answers with: its kind's, else otherwise.
func statusOf(err error, otherwise int) int {
	for _, s := range statuses {
		if errors.Is(err, s.kind) {
			return s.code
		}
	}
	return otherwise
}

// kindOf is the kind of failure a status stands for, or nil.
func kindOf(code int) error {
	for _, s := range statuses {
		if s.code == code {
			return s.kind
		}
	}
	return nil
}

// maxRequestBody bounds a JSON request body.
const maxRequestBody = 64 << 10

// Server serves the API on one listener.
type Server struct {
	srv *http.Server
	log *slog.Logger
	// stop ends the requests' contexts, so that the streams (which never
	// go idle) return when the server shuts down.
	stop context.CancelFunc
}

// NewServer builds the handlers behind g; it listens on nothing until
// Serve.
func NewServer(b Backend, metrics prometheus.Gatherer, g Guard, log *slog.Logger) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Status(r.Context()) })
	})
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Peers(r.Context()) })
	})
	mux.HandleFunc("GET /v1/offers", func(w http.ResponseWriter, r *http.Request) {
		q, limit, err := offerQuery(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, Error{Error: err.Error()})
			return
		}
		reply(w, func() (any, error) {
			offers, err := b.Offers(r.Context(), q)
			if limit > 0 && len(offers) > limit {
				offers = offers[:limit]
			}
			return offers, err
		})
	})
	mux.HandleFunc("POST /v1/match", func(w http.ResponseWriter, r *http.Request) {
		var req BidRequest
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.Match(r.Context(), req) })
	})
	mux.HandleFunc("POST /v1/bids", func(w http.ResponseWriter, r *http.Request) {
		var req BidRequest
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.PlaceBid(r.Context(), req) })
	})
	mux.HandleFunc("POST /v1/attest", func(w http.ResponseWriter, r *http.Request) {
		var req AttestRequest
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.Attest(r.Context(), req) })
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Leases(r.Context()) })
	})
	mux.HandleFunc("POST /v1/leases/{id}/extension", func(w http.ResponseWriter, r *http.Request) {
		var req ExtensionNote
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.NoteExtension(r.Context(), r.PathValue("id"), req.Extension) })
	})
	mux.HandleFunc("POST /v1/leases/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.CancelLease(r.Context(), r.PathValue("id")) })
	})
	mux.HandleFunc("POST /v1/channels/redeem", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Redeem(r.Context()) })
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Reload(r.Context()) })
	})
	mux.HandleFunc("GET /v1/receipts", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Receipts(r.Context()) })
	})
	mux.HandleFunc("GET /v1/datasets", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Datasets(r.Context()) })
	})
	mux.HandleFunc("POST /v1/datasets", func(w http.ResponseWriter, r *http.Request) {
		var req DatasetAdd
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.AddDataset(r.Context(), req) })
	})
	mux.HandleFunc("POST /v1/datasets/{cid}/pin", func(w http.ResponseWriter, r *http.Request) {
		var req DatasetPin
		if !readJSON(w, r, &req) {
			return
		}
		reply(w, func() (any, error) { return b.PinDataset(r.Context(), r.PathValue("cid"), req.Pin) })
	})
	mux.HandleFunc("POST /v1/datasets/{cid}/remove", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.RemoveDataset(r.Context(), r.PathValue("cid")) })
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Ledger(r.Context()) })
	})
	mux.HandleFunc("GET /v1/reputation/{peer}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Reputation(r.Context(), r.PathValue("peer")) })
	})
	mux.HandleFunc("GET /v1/leases/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Lease(r.Context(), r.PathValue("id")) })
	})
	mountUI(mux, b, g)
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, Error{Error: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	base, stop := context.WithCancel(context.Background())
	return &Server{
		srv: &http.Server{
			BaseContext:       func(net.Listener) context.Context { return base },
			Handler:           g.wrap(mux),
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      30 * time.Second,
			MaxHeaderBytes:    16 << 10,
		},
		log:  log,
		stop: stop,
	}
}

// Serve answers requests on ln until Shutdown; it returns at once.
func (s *Server) Serve(ln net.Listener) {
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("api server stopped", "err", err)
		}
	}()
}

// Shutdown stops accepting requests and waits for those in flight.
// The streams end at once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	return s.srv.Shutdown(ctx)
}

// reply writes what f returns: 200, or its error's status (statuses),
// else 500.
func reply(w http.ResponseWriter, f func() (any, error)) {
	v, err := f()
	if err != nil {
		writeError(w, err, http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// writeError answers err with its kind's status (statuses), else with
// otherwise.
func writeError(w http.ResponseWriter, err error, otherwise int) {
	writeJSON(w, statusOf(err, otherwise), Error{Error: err.Error()})
}

// readJSON decodes a bounded request body strictly, answering 400 itself.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, Error{Error: "request body: " + err.Error()})
		return false
	}
	if dec.More() {
		writeJSON(w, http.StatusBadRequest, Error{Error: "request body: one JSON object expected, more follows"})
		return false
	}
	return true
}

// offerQuery reads GET /v1/offers' filters, and its limit (0: none).
func offerQuery(r *http.Request) (OfferQuery, int, error) {
	q := r.URL.Query()
	vram, err := optInt(q.Get("min_vram_gib"))
	if err != nil {
		return OfferQuery{}, 0, fmt.Errorf("min_vram_gib: %w", err)
	}
	limit, err := optInt(q.Get("limit"))
	if err != nil {
		return OfferQuery{}, 0, fmt.Errorf("limit: %w", err)
	}
	return OfferQuery{GPU: q.Get("gpu"), MinVRAMGiB: vram, Country: q.Get("country"), MaxPrice: q.Get("max_price"), Tier: q.Get("tier"), Sort: q.Get("sort"), Where: q.Get("where"), Dataset: q.Get("dataset")}, limit, nil
}

// optInt reads an optional non-negative integer query parameter.
func optInt(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > 1<<20 {
		return 0, fmt.Errorf("%q: want an integer from 0 to %d", s, 1<<20)
	}
	return v, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
