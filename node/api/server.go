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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Backend is what the server reads; node implements it.
type Backend interface {
	Status() Status
	Peers() []Peer
	Offers(OfferQuery) ([]OfferView, error)
	Match(context.Context, BidRequest) (MatchResult, error)
	PlaceBid(context.Context, BidRequest) (BidResult, error)
	Attest(context.Context, AttestRequest) (AttestResult, error)
	Leases(context.Context) ([]LeaseView, error)
	Receipts(context.Context) ([]ReceiptView, error)
	Ledger(context.Context) ([]LedgerEntry, error)
	CancelLease(context.Context, string) (LeaseView, error)
	Reputation(ctx context.Context, peer string) (ReputationView, error)
}

// BadRequest marks a Backend error caused by the request (HTTP 400).
type BadRequest struct{ Err error }

func (e BadRequest) Error() string { return e.Err.Error() }
func (e BadRequest) Unwrap() error { return e.Err }

// maxRequestBody bounds a JSON request body.
const maxRequestBody = 64 << 10

// Server serves the API on one listener.
type Server struct {
	srv *http.Server
	log *slog.Logger
}

// NewServer builds the handlers behind g; it listens on nothing until
// Serve.
func NewServer(b Backend, metrics prometheus.Gatherer, g Guard, log *slog.Logger) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Peers())
	})
	mux.HandleFunc("GET /v1/offers", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		vram, err := optInt(q.Get("min_vram_gib"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, Error{Error: "min_vram_gib: " + err.Error()})
			return
		}
		reply(w, func() (any, error) {
			return b.Offers(OfferQuery{GPU: q.Get("gpu"), MinVRAMGiB: vram, Country: q.Get("country"), MaxPrice: q.Get("max_price"), Tier: q.Get("tier"), Sort: q.Get("sort")})
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
	mux.HandleFunc("POST /v1/leases/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.CancelLease(r.Context(), r.PathValue("id")) })
	})
	mux.HandleFunc("GET /v1/receipts", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Receipts(r.Context()) })
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Ledger(r.Context()) })
	})
	mux.HandleFunc("GET /v1/reputation/{peer}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Reputation(r.Context(), r.PathValue("peer")) })
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, Error{Error: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return &Server{
		srv: &http.Server{
			Handler:           g.wrap(mux),
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      30 * time.Second,
			MaxHeaderBytes:    16 << 10,
		},
		log: log,
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
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// reply writes what f returns: 200, 400 for a BadRequest, else 500.
func reply(w http.ResponseWriter, f func() (any, error)) {
	v, err := f()
	var bad BadRequest
	switch {
	case errors.As(err, &bad):
		writeJSON(w, http.StatusBadRequest, Error{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, Error{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, v)
	}
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
