package main

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
	golog "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/gologshim"
	"go.uber.org/zap/zapcore"
)

// setupLogging builds the process's logger from the config and the
// --log-format and --log-level flags, and routes libp2p's own loggers
// (slog through gologshim, zap through go-log) to the same place and levels.
func (e *env) setupLogging(cfg config.LogConfig) (*slog.Logger, error) {
	if e.logFmt != "" {
		cfg.Format = e.logFmt
	}
	if e.logLvl != "" {
		cfg.Level = e.logLvl
	}
	if cfg.Format != "text" && cfg.Format != "json" {
		return nil, usagef("--log-format %q: want text or json", cfg.Format)
	}
	if _, err := node.ParseLevel(cfg.Level); err != nil {
		return nil, usagef("--log-level: %v", err)
	}
	h := newLogHandler(e.stderr, cfg)
	gologshim.SetDefaultHandler(h)

	gc := golog.Config{Format: golog.PlaintextOutput, Stderr: true, SubsystemLevels: map[string]golog.LogLevel{}}
	if cfg.Format == "json" {
		gc.Format = golog.JSONOutput
	}
	gc.Level = goLevel(cfg.Level)
	if l, ok := cfg.Subsystems[node.LogLibp2p]; ok {
		gc.Level = goLevel(l)
	}
	// go-log names are case-sensitive (dht/RtRefreshManager); config keys
	// are lower case, so match them case-insensitively.
	for _, sys := range golog.GetSubsystems() {
		if l, ok := cfg.Subsystems[strings.ToLower(sys)]; ok {
			gc.SubsystemLevels[sys] = goLevel(l)
		}
	}
	golog.SetupLogging(gc)
	golog.SetPrimaryCore(slogCore{h: h})
	logger := slog.New(h)
	slog.SetDefault(logger)
	return logger, nil
}

// newLogHandler is node's handler for cfg (valid), whose JSON records
// hold peers' text inert (inertHandler).
func newLogHandler(w io.Writer, cfg config.LogConfig) slog.Handler {
	h := node.NewLogHandler(w, cfg)
	if cfg.Format == "json" {
		h = inertHandler{h}
	}
	return h
}

func goLevel(s string) golog.LogLevel {
	l, err := golog.Parse(s)
	if err != nil {
		return golog.LevelInfo
	}
	return l
}

func slogDefault() *slog.Logger { return slog.Default() }

// slogCore hands go-log's zap records (kad-dht logs through go-log) to the
// process's slog handler, so every line has one format and one set of
// levels. go-log's per-logger levels filter first; the handler, which
// knows the logger's name, filters again.
type slogCore struct {
	h slog.Handler
}

func (c slogCore) Enabled(zapcore.Level) bool { return true }

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{h: c.h.WithAttrs(zapAttrs(fields))}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	ctx := context.Background()
	h := c.h.WithAttrs([]slog.Attr{slog.String("logger", e.LoggerName)})
	lvl := slog.LevelInfo
	switch {
	case e.Level < zapcore.InfoLevel:
		lvl = slog.LevelDebug
	case e.Level == zapcore.WarnLevel:
		lvl = slog.LevelWarn
	case e.Level > zapcore.WarnLevel:
		lvl = slog.LevelError
	}
	if !h.Enabled(ctx, lvl) {
		return nil
	}
	r := slog.NewRecord(e.Time, lvl, e.Message, 0)
	r.AddAttrs(zapAttrs(fields)...)
	return h.Handle(ctx, r)
}

func (c slogCore) Sync() error { return nil }

func zapAttrs(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}
