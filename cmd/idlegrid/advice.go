package main

import (
	"errors"
	"slices"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/fault"
)

// advice is the CLI's one table from a failure to what its user can do
// about it, said on a line of its own after the error. Domain packages
// say what went wrong and never name a command or a flag; this table
// does. The first entry that matches speaks.
var advice = []struct {
	is  func(error) bool
	say string
}{
	{anAttempt(node.ErrNotAttestable), "rent --no-attest leases from such providers, trusting what they claim"},
	{kind(fault.ErrNotFound), "'idlegrid leases' lists this repository's leases"},
	{kind(fault.ErrUnavailable), "'idlegrid config show' shows what this node is configured to do"},
}

// adviceFor is what advice says of err, or "".
func adviceFor(err error) string {
	for _, a := range advice {
		if a.is(err) {
			return a.say
		}
	}
	return ""
}

// kind matches the failures of a kind of package fault.
func kind(k error) func(error) bool {
	return func(err error) bool { return errors.Is(err, k) }
}

// anAttempt matches a rental that got no lease where one of its attempts
// failed with target.
func anAttempt(target error) func(error) bool {
	return func(err error) bool {
		var np *node.NoProviderError
		return errors.As(err, &np) && slices.ContainsFunc(np.Attempts, func(a node.Attempt) bool { return errors.Is(a.Err, target) })
	}
}
