package main

import (
	"log/slog"
	"strings"

	"github.com/idlegrid/idlegrid/node"
	golog "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/gologshim"
)

// setupLogging builds the process's logger from the config and the
// --log-format and --log-level flags, and routes libp2p's own loggers
// (slog through gologshim, zap through go-log) to the same place and levels.
func (e *env) setupLogging(cfg node.LogConfig) (*slog.Logger, error) {
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
	h := node.NewLogHandler(e.stderr, cfg)
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
	logger := slog.New(h)
	slog.SetDefault(logger)
	return logger, nil
}

func goLevel(s string) golog.LogLevel {
	l, err := golog.Parse(s)
	if err != nil {
		return golog.LevelInfo
	}
	return l
}

func slogDefault() *slog.Logger { return slog.Default() }
