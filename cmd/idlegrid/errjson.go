package main

import (
	"errors"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/repo"
)

// errorJSON is what a command run with --json prints on stdout when it
// fails, and nothing else there: the message its stderr line says, and a
// code from errorCodes that scripts may match on.
type errorJSON struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// errorCodes is the one table from a failure to its stable code in
// errorJSON; the first that matches names it, and a failure none matches
// is "failure"; rent's and exec's own exits name theirs (exitError).
// The codes are part of the CLI's interface: add, never
// rename.
var errorCodes = []struct {
	is   func(error) bool
	code string
}{
	{isUsage, "usage"},
	{kind(repo.ErrNoRepo), "no_repository"},
	{kind(repo.ErrRepoLocked), "locked"},
	{kind(config.ErrConfig), "config"},
	{kind(api.ErrNoDaemon), "no_daemon"},
	{isBootstrapError, "unreachable"},
	{kind(errNoPeers), "no_peers"},

	{kind(fault.ErrNotFound), "not_found"},
	{kind(fault.ErrInvalid), "invalid"},
	{kind(fault.ErrConflict), "conflict"},
	{kind(fault.ErrUnavailable), "unavailable"},
}

// errorCode is err's code in errorJSON: an exitError's name, else
// errorCodes'.
func errorCode(err error) string {
	var xe exitError
	if errors.As(err, &xe) {
		return xe.name
	}
	for _, c := range errorCodes {
		if c.is(err) {
			return c.code
		}
	}
	return "failure"
}

// isBootstrapError: a start that reached none of the bootstrap peers.
func isBootstrapError(err error) bool {
	var be *node.BootstrapError
	return errors.As(err, &be)
}

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue) || isCobraUsage(err)
}

// stableCodes lists every code errorJSON may carry, for the help.
func stableCodes() []string {
	var codes []string
	for _, c := range errorCodes {
		codes = append(codes, c.code)
	}
	return append(codes, "nothing_fits", "refused", "provider_lost", "interrupted", "job_failed", "command_failed", "failure")
}

// wantsJSON says whether args ask for --json, read before cobra parses
// them, so that a command line cobra refuses still fails in JSON.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}
