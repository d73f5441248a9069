package main

import (
	"errors"
	"fmt"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

func newAttachCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "attach LEASE",
		Short: "Follow a rented job again, from where its kept output ends, to the receipt",
		Long: `Follow a lease this repository rented and has not seen end: one left
running by 'idlegrid rent --detach', or by a rent that was killed. The job's
output streams again from where the copy kept under logs/ ends, no line
lost or repeated: the provider sends what it had not sent, from its
backlog or from the engine's log of the job (across a restart of the
provider too); after the job's end it keeps the last MiB it had not sent,
with the receipt, until the renter attaches. The telemetry is verified as
it arrives, and at the end both sides sign the receipt, as with rent.

Ctrl-C detaches again: the job runs on. 'idlegrid cancel LEASE' ends it.
Exit codes as rent's: the job's own when it ended (also for a lease that
had ended already), 124 when its end was never seen, 0 on a detach.`,
		Example: `  id=$(idlegrid rent --detach --gpu A100 --hours 8 --max-price 2.50 --image pytorch/pytorch:2.4 -- python train.py)
  idlegrid attach "$id"`,
		Args: exactArgs(1, "LEASE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if _, err := repo.Open(e.repoPath()); errors.Is(err, repo.ErrNoRepo) {
				return fmt.Errorf("no repository at %s: attach follows the leases a repository rented (--repo)", e.repoPath())
			}
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			n, done, err := e.lightNode(nil, false)
			if err != nil {
				return err
			}
			defer done()
			lines := newProgressLines(e.stderr)
			progress, status := lines.step, lines.status
			jobOut := e.stdout
			if e.asJSON {
				progress, status, jobOut = func(string) {}, func(string) {}, e.stderr
			}
			res, err := n.Attach(e.ctx, args[0], node.RentOutput{Stdout: jobOut, Stderr: e.stderr, Progress: progress, Status: status})
			lines.end()
			if err != nil {
				return err
			}
			if e.asJSON {
				if err := e.printJSON(res); err != nil || res.Detached {
					return err
				}
			} else if res.Detached {
				fmt.Fprintf(e.stderr, "idlegrid: detached from lease %s; it runs on (idlegrid attach %s, idlegrid cancel %s)\n", res.Lease.ID, res.Lease.ID, res.Lease.ID)
				return nil
			} else {
				printEnd(e, res)
			}
			return rentEnded(e.ctx, res)
		},
	}
	addJSONFlag(c, e)
	return c
}
