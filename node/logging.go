package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/idlegrid/idlegrid/node/config"
)

// Subsystems of idlegrid's own logs. libp2p's loggers carry their own names
// (dht, pubsub, swarm2, …) and fall back to the "libp2p" level.
const (
	LogNode   = "node"
	LogP2P    = "p2p"
	LogAPI    = "api"
	LogLibp2p = "libp2p"
)

// ParseLevel maps debug, info, warn or error to a slog level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want one of %v", s, config.Levels)
	}
	return l, nil
}

// NewLogHandler returns a slog handler writing text or JSON to w that
// filters each record by its subsystem's level: the "subsystem" attribute
// of idlegrid's loggers, or the "logger" attribute libp2p's loggers carry.
// It assumes cfg is valid.
func NewLogHandler(w io.Writer, cfg config.LogConfig) slog.Handler {
	opts := &slog.HandlerOptions{Level: slog.LevelDebug}
	var base slog.Handler
	if cfg.Format == "json" {
		base = slog.NewJSONHandler(w, opts)
	} else {
		base = slog.NewTextHandler(w, opts)
	}
	def, _ := ParseLevel(cfg.Level)
	levels := make(map[string]slog.Level, len(cfg.Subsystems))
	for name, s := range cfg.Subsystems {
		levels[name], _ = ParseLevel(s)
	}
	return &levelHandler{base: base, def: def, levels: levels, level: def}
}

// levelHandler routes records by subsystem; its state is immutable, so
// it is safe for concurrent use like any slog handler.
type levelHandler struct {
	base   slog.Handler
	def    slog.Level
	levels map[string]slog.Level
	level  slog.Level
}

func (h *levelHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.base.Handle(ctx, r)
}

func (h *levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := *h
	for _, a := range attrs {
		switch a.Key {
		case "subsystem":
			out.level = h.levelFor(a.Value.String(), h.def)
		case "logger":
			lib := h.levelFor(LogLibp2p, h.def)
			out.level = h.levelFor(strings.ToLower(a.Value.String()), lib)
		}
	}
	out.base = h.base.WithAttrs(attrs)
	return &out
}

func (h *levelHandler) WithGroup(name string) slog.Handler {
	out := *h
	out.base = h.base.WithGroup(name)
	return &out
}

func (h *levelHandler) levelFor(name string, fallback slog.Level) slog.Level {
	if l, ok := h.levels[name]; ok {
		return l
	}
	return fallback
}
