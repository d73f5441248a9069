package main

import (
	"fmt"
	"math"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

// extendResult is what `idlegrid extend --json` prints.
type extendResult struct {
	LeaseID         string    `json:"lease_id"`
	Seq             uint32    `json:"seq"`
	DurationSeconds uint64    `json:"duration_seconds"`
	End             time.Time `json:"end"`
}

func newExtendCmd(e *env) *cobra.Command {
	var hours float64
	c := &cobra.Command{
		Use:   "extend LEASE --hours H",
		Short: "Ask the provider to extend a running lease's term",
		Long: `Ask the provider of one of your running leases to extend its term by
--hours. You sign the extension, the provider countersigns it when its
calendar has the lease's GPUs free and offered for the added time (at a
floor no higher than the lease's price) and the whole term stays within its
longest lease; the job then runs to the new end, and its receipt meters
within it, at the lease's price, and names the extension. A refusal says
why and changes nothing.

extend works while 'idlegrid rent' or 'idlegrid attach' follows the lease
in another terminal (they learn of the extension on the job stream), and
while it runs detached; the lease's record here ('idlegrid leases') says
the new end once extend returns.`,
		Example: `  idlegrid extend lease-4f2a… --hours 2`,
		Args:    exactArgs(1, "LEASE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if !(hours > 0 && hours <= market.MaxTermSeconds/3600) {
				return usagef("--hours %v: want more than 0 and at most %d", hours, market.MaxTermSeconds/3600)
			}
			add := time.Duration(math.Ceil(hours*3600)) * time.Second
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			link, err := e.dialLease("extend", args[0])
			if err != nil {
				return err
			}
			defer link.Close()
			t, err := link.Extend(e.ctx, add)
			if err != nil {
				return err
			}
			res := extendResult{LeaseID: args[0], Seq: t.Seq, DurationSeconds: t.Lease.DurationSeconds, End: t.End().UTC()}
			// The renter's record says the new end too, now: through the
			// daemon, or the repository itself. A rent or attach holding
			// the repository learns of it on the job stream instead.
			raw, err := proto.Marshal(t.Extension)
			if err == nil {
				_, err = records(e, func(r api.Records) (api.LeaseView, error) { return r.NoteExtension(e.ctx, args[0], raw) })
			}
			if err != nil {
				fmt.Fprintf(e.stderr, "idlegrid: the extension holds, but this repository's record of %s was not updated (%s): the 'idlegrid rent' or 'attach' following it records it\n", args[0], oneLine(err))
			}
			if e.asJSON {
				return e.printJSON(res)
			}
			fmt.Fprintf(e.stdout, "lease %s extended by %s: it ends at %s (extension %d, countersigned by the provider)\n",
				res.LeaseID, add, res.End.Format(time.RFC3339), res.Seq)
			return nil
		},
	}
	c.Flags().Float64Var(&hours, "hours", 0, "how much longer the lease runs, in hours (0.5: 30 minutes)")
	addJSONFlag(c, e)
	return c
}
