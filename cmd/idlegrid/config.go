package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// newConfigCmd is 'idlegrid config' with its show, get and set
// subcommands. It is long for their help texts and arguments, which a
// reader looks for in one place; what they do is in the repo and config
// packages.
func newConfigCmd(e *env) *cobra.Command {
	c := parentCmd("config", "Show, read or change the repository's config.toml")
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the whole config, every setting with its comment",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			if e.asJSON {
				tree, err := cfg.Tree()
				if err != nil {
					return err
				}
				return e.printJSON(tree)
			}
			data, err := cfg.Marshal()
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(data)
			return err
		},
	}
	addJSONFlag(show, e)
	get := &cobra.Command{
		Use:     "get KEY",
		Short:   "Print one setting, such as network.listen",
		Example: "  idlegrid config get api.port",
		Args:    exactArgs(1, "KEY"),
		RunE: func(_ *cobra.Command, args []string) error {
			_, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			v, err := cfg.Get(args[0])
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(v)
			}
			fmt.Fprintln(e.stdout, formatValue(v))
			return nil
		},
	}
	addJSONFlag(get, e)
	set := &cobra.Command{
		Use:   "set KEY VALUE",
		Short: "Change one setting after checking it; an invalid value changes nothing",
		Long: `Change one setting. VALUE is read as a TOML value (4001, true, "30s",
["/ip4/0.0.0.0/tcp/4001"]); a bare word is taken as a string. The whole
config is checked before it is written, and written atomically.
When a daemon runs on the repository, set has it reload the file (as
SIGHUP does) and says what came of it: the provider's terms (prices,
windows, tiers, durations, workload and image policy, caps, a static GPU
list) apply at once; other settings wait for the daemon's restart.`,
		Example: `  idlegrid config set log.level debug
  idlegrid config set network.bootstrap '["/ip4/198.51.100.1/tcp/4001/p2p/12D3KooW…"]'
  idlegrid config set log.subsystems.dht debug`,
		Args: exactArgs(2, "KEY VALUE"),
		RunE: func(_ *cobra.Command, args []string) error {
			r, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			out, err := cfg.Set(args[0], args[1])
			if err != nil {
				return err
			}
			if _, err := r.SwarmKey(out); err != nil {
				return err
			}
			if err := config.WriteConfig(r.ConfigPath(), out); err != nil {
				return err
			}
			v, _ := out.Get(args[0])
			fmt.Fprintf(e.stdout, "%s = %s\n", args[0], formatValue(v))
			if _, err := os.Stat(filepath.Join(r.Path, repo.APIFile)); err == nil {
				if say := e.reloadDaemon(args[0]); say != "" {
					fmt.Fprintln(e.stderr, say)
				}
			}
			return nil
		},
	}
	c.AddCommand(show, get, set)
	return c
}

// reloadDaemon has the daemon running on the repository reload its
// config and says, for the setting key, what came of it ("" when no
// daemon answers).
func (e *env) reloadDaemon(key string) string {
	var res api.ReloadResult
	err := e.apiCall(func(c api.Node) (err error) {
		res, err = c.Reload(e.ctx)
		return err
	})
	has := func(keys []string) bool {
		return slices.ContainsFunc(keys, func(k string) bool { return key == k || strings.HasPrefix(key, k+".") })
	}
	switch {
	case errors.Is(err, api.ErrNoDaemon):
		return ""
	case err != nil:
		return fmt.Sprintf("the running daemon did not reload its config (%v): restart it to apply the change", err)
	case has(res.Applied):
		return fmt.Sprintf("the running daemon applied %s", key)
	case has(res.NeedRestart):
		return fmt.Sprintf("the running daemon takes %s at its next start: restart it to apply the change", key)
	}
	return fmt.Sprintf("the running daemon already runs with this %s", key)
}

func formatValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// exactArgs is cobra.ExactArgs with a message naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s needs %s (got %d arguments); see --help", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}
