package main

import (
	"fmt"
	"strings"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

func newReputationCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "reputation PEER",
		Short: "Show how this node rates a peer, and why",
		Long: `Show the running daemon's view of PEER: its reliability as a provider (what
the matcher weighs, and what a bid's min_reliability filters on), its score
as a renter, and what they rest on.

Scores are this node's own. Trust flows from this node and its seeds
through the graph of co-signed receipts, decaying per hop and with age; a
provider's reliability is the vote of its receipts, each weighed by the
trust of the renter that co-signed it, against a prior of 0.60 for a
provider with no history. The path shows how trust reached PEER.

The seeds are reputation.seeds when set. Otherwise they are the bootstrap
peers, in a private swarm its allow-list, and the seeds the bootstrap
peers' operators chose (asked at start and hourly): a bootstrap peer
leases nothing, so trust from it alone reaches no one. Each seed is shown
with where it came from.

A provider in the book that the daemon has not asked in the last 30
minutes is first asked for the receipts it holds of itself (up to 5 s).`,
		Example: `  idlegrid reputation 12D3KooW…
  idlegrid reputation 12D3KooW… --json`,
		Args: exactArgs(1, "PEER"),
		RunE: func(_ *cobra.Command, args []string) error {
			var v api.ReputationView
			if err := e.apiCall(func(c api.Node) (err error) { v, err = c.Reputation(e.ctx, args[0]); return }); err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(v)
			}
			inert.Strings(&v)
			fmt.Fprintf(e.stdout, "%s\n  as a provider: %s\n  as a renter:   %.2f\n  trust:         %.3f of this node's own\n  votes:         %.2f good, %.2f bad\n",
				v.Peer, v.Basis, v.AsRenter, v.Trust, v.Good, v.Bad)
			if len(v.Path) == 0 {
				fmt.Fprintln(e.stdout, "  path:          no trust reaches it yet")
			} else {
				hops := make([]string, len(v.Path))
				for i, p := range v.Path {
					hops[i] = short(p)
				}
				fmt.Fprintf(e.stdout, "  path:          %s\n", strings.Join(hops, " → "))
			}
			if len(v.Seeds) == 0 {
				fmt.Fprintln(e.stdout, "  seeds:         none: trust flows from this node alone")
			}
			for i, s := range v.Seeds {
				label := ""
				if i == 0 {
					label = "seeds:"
				}
				fmt.Fprintf(e.stdout, "  %-14s %s (%s)\n", label, short(s.Peer), s.From)
			}
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}
