package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// Exit codes scripts can rely on.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks a mistake in the command line itself (exit 2).
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// env is what a command may touch of the outside world.
type env struct {
	ctx    context.Context
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	repo   string // --repo
	logFmt string // --log-format
	logLvl string // --log-level
	asJSON bool   // --json where a command has it
	// printedJSON is set once a command has printed its JSON answer, after
	// which a failure adds no errorJSON to stdout.
	printedJSON bool
}

// run executes one idlegrid command line and returns its exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, getenv: getenv, stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(negativesAsArgs(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	err = fieldAsFlag(cmd, withCommandSuggestion(cmd, err))
	fmt.Fprintf(stderr, "idlegrid: %s\n", inert.Text(oneLine(err)))
	if (e.asJSON || wantsJSON(args)) && !e.printedJSON {
		e.printJSON(errorJSON{Error: oneLine(err), Code: errorCode(err)})
	}
	if say := adviceFor(err); say != "" {
		fmt.Fprintf(stderr, "idlegrid: hint: %s\n", say)
	}
	var ue usageError
	var xe exitError
	switch {
	case errors.As(err, &ue) || isCobraUsage(err):
		return exitUsage
	case errors.As(err, &xe):
		return xe.code
	}
	return exitFailure
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// isCobraUsage recognises cobra's own command-line errors, which it does
// not type; flag errors arrive as usageError through SetFlagErrorFunc.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command ", "accepts ", "requires at least ", "requires at most ", "required flag(s) "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "idlegrid",
		Short: "A peer-to-peer market for GPU time",
		Long: `idlegrid sells the idle windows of GPUs and rents them out, peer to peer.

Providers run the daemon next to their GPUs; renters run a light client;
research groups form private swarms. Every node finds its swarm through the
Kademlia DHT and gossips signed offers and bids over libp2p pubsub.

Start here:
  idlegrid devstack                 a whole local swarm in one process
  idlegrid init --profile provider  create a repository (~/.idlegrid)
  idlegrid daemon                   run a node from it
  idlegrid status                   ask the running node how it is

Scripting: exit status 0 is success, 2 a wrong command line, 1 any other
failure (rent and exec also exit with their job's code: see their help).
With --json a command prints JSON on stdout and nothing else there; when it
fails, that is one object, {"error": MESSAGE, "code": CODE}, the message its
stderr line says too and a code that stays: ` + strings.Join(stableCodes(), ", ") + `.`,
		SilenceErrors:      true,
		SilenceUsage:       true,
		DisableSuggestions: true, // unknownCommand suggests, one command
		Version:            version,
	}
	root.SetFlagErrorFunc(flagError)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if e.logFmt != "" && e.logFmt != "text" && e.logFmt != "json" {
			return usagef("--log-format %q: want text or json", e.logFmt)
		}
		if e.logLvl != "" {
			if _, err := node.ParseLevel(e.logLvl); err != nil {
				return usagef("--log-level: %v", err)
			}
		}
		return nil
	}
	pf := root.PersistentFlags()
	pf.StringVar(&e.repo, "repo", "", "repository `DIR` (default $"+repo.EnvRepo+" or ~/.idlegrid)")
	pf.StringVar(&e.logFmt, "log-format", "", "log format: text or json (default from config, else text)")
	pf.StringVar(&e.logLvl, "log-level", "", "default log level: debug, info, warn or error (default from config)")
	root.AddCommand(
		newInitCmd(e), newConfigCmd(e), newDaemonCmd(e), newSwarmCmd(e),
		newIDCmd(e), newWaitCmd(e), newExecCmd(e), newPortForwardCmd(e), newCpCmd(e), newStatusCmd(e), newPeersCmd(e), newDevstackCmd(e), newVersionCmd(e),
		newOffersCmd(e), newQuoteCmd(e), newBidCmd(e), newGPUsCmd(e), newAttestCmd(e),
		newRentCmd(e), newAttachCmd(e), newExtendCmd(e), newLeasesCmd(e), newLogsCmd(e), newCancelCmd(e), newReceiptsCmd(e), newLedgerCmd(e), newReputationCmd(e), newDoctorCmd(e), newUICmd(e),
		newWalletCmd(e), newChannelCmd(e), newDatasetCmd(e),
	)
	return root
}

// repoPath is --repo, else $IDLEGRID_PATH, else ~/.idlegrid.
func (e *env) repoPath() string {
	if e.repo != "" {
		return e.repo
	}
	return repo.DefaultRepoPath(e.getenv)
}

// openRepo opens the repository and loads its config.
func (e *env) openRepo() (*repo.Repo, config.Config, error) {
	r, err := repo.Open(e.repoPath())
	if err != nil {
		return nil, config.Config{}, err
	}
	cfg, err := r.Config()
	if err != nil {
		return nil, config.Config{}, err
	}
	return r, cfg, nil
}

// printJSON writes v as indented JSON on stdout.
func (e *env) printJSON(v any) error {
	e.printedJSON = true
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printList prints a list as JSON with --json, else as an aligned table
// that rows writes (tab-separated), or the empty message when n is 0. v is
// the slice rows reads: its strings are made inert (inert.Strings) in
// place before rows runs, so no peer's text acts on the terminal.
func (e *env) printList(v any, n int, empty string, rows func(io.Writer)) error {
	if e.asJSON {
		return e.printJSON(v)
	}
	inert.Strings(v)
	if n == 0 {
		fmt.Fprintln(e.stdout, empty)
		return nil
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	rows(w)
	return w.Flush()
}

func addJSONFlag(c *cobra.Command, e *env) {
	c.Flags().BoolVar(&e.asJSON, "json", false, `print JSON instead of text; a failure prints {"error": MESSAGE, "code": CODE} on stdout (see idlegrid --help)`)
}

func newVersionCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if e.asJSON {
				return e.printJSON(map[string]string{"version": version})
			}
			fmt.Fprintln(e.stdout, "idlegrid", version)
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}

// parentCmd is a command that only groups others: run bare it prints its
// help; with an unknown subcommand it is a usage error (exit 2).
func parentCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
}
