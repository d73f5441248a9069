package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Backend is what the server reads; node implements it.
type Backend interface {
	Status() Status
	Peers() []Peer
}

// Server serves the API on one listener.
type Server struct {
	srv *http.Server
	log *slog.Logger
}

// NewServer builds the handlers; it listens on nothing until Serve.
func NewServer(b Backend, metrics prometheus.Gatherer, log *slog.Logger) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Peers())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, Error{Error: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return &Server{
		srv: &http.Server{
			Handler:           mux,
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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
