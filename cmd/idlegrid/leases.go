package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/spf13/cobra"
)

// records runs f against the running daemon, or, with none, against
// the repository's datastore directly (it then holds the repository's
// lock meanwhile): one command, written once, for both.
func records[T any](e *env, f func(api.Records) (T, error)) (T, error) {
	var out T
	err := e.apiCall(func(c api.Node) (err error) { out, err = f(c); return })
	if !errors.Is(err, api.ErrNoDaemon) {
		return out, err
	}
	r, err := repo.Open(e.repoPath())
	if err != nil {
		return out, err
	}
	recs, err := node.OpenRecords(r)
	if err != nil {
		return out, err
	}
	defer recs.Close()
	return f(recs)
}

func newLeasesCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "leases",
		Short: "List this node's leases, as renter and as provider",
		Long: `List every lease of this repository: the ones rented (role renter) and, on a
provider, the ones sold (role provider), with their state: accepted, active,
settling, completed, preempted, failed or cancelled. A renter's lease is
settling when its provider was gone: the renter holds a receipt of its own
for the telemetry it verified, and settles the lease with the provider if it
is back within 15 minutes (one receipt both sign); after that its own receipt
stands. Through the daemon when one runs (its settler tries every 20 s), else
from the repository itself, which first tries once, through a light node and
for up to 45 s, to settle with their providers the leases it holds settling,
and to close the ones it holds open (a killed or detached rent's) that their
providers have ended; one still running is left alone. What it shows then
agrees with what the providers hold.`,
		Example: `  idlegrid leases
  idlegrid leases --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			e.settleFirst()
			ls, err := records(e, func(r api.Records) ([]api.LeaseView, error) { return r.Leases(e.ctx) })
			if err != nil {
				return err
			}
			return e.printList(ls, len(ls), "no leases", func(w io.Writer) {
				fmt.Fprintln(w, "LEASE\tROLE\tSTATE\tPEER\tGPUS\tTIER\tPRICE/GPU-H\tSTART\tEND\tIMAGE")
				for _, l := range ls {
					other := l.Provider
					if l.Role == "provider" {
						other = l.Renter
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s %s\t%s\t%s\t%s\n", l.ID, l.Role, l.State, short(other), l.GPUs, l.Tier, l.Price, l.Currency,
						l.Start.Local().Format(time.DateTime), l.End.Local().Format(time.TimeOnly), l.Image)
				}
			})
		},
	}
	addJSONFlag(c, e)
	return c
}

func newReceiptsCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "receipts",
		Short: "List the receipts of ended leases and who signed them",
		Long: `List the receipt of every ended lease: outcome, metered seconds, amount, the
telemetry chain's root, and which parties' signatures verify. A receipt both
renter and provider signed is settled; one signed by one side is that side's
claim (the other vanished or disagreed). With no daemon running, leases this
repository holds settling are first settled with their providers once, as
'idlegrid leases' does.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			e.settleFirst()
			rs, err := records(e, func(r api.Records) ([]api.ReceiptView, error) { return r.Receipts(e.ctx) })
			if err != nil {
				return err
			}
			return e.printList(rs, len(rs), "no receipts", func(w io.Writer) {
				fmt.Fprintln(w, "LEASE\tOUTCOME\tSECONDS\tAMOUNT\tBEATS\tEXIT\tSIGNED BY\tNOTE")
				for _, r := range rs {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s %s\t%d\t%d\t%s\t%s\n", r.LeaseID, r.Outcome, r.MeteredSeconds, r.Amount, r.Currency, r.Beats, r.ExitCode,
						strings.Join(r.SignedBy, "+"), r.Note)
				}
			})
		},
	}
	addJSONFlag(c, e)
	return c
}

func newLedgerCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "ledger",
		Short: "Show the local ledger: what each counterparty owes or is owed",
		Long: `Show the local ledger, the default settlement: one balance per counterparty
and currency, the sum of the receipts with it. Positive: the peer owes this
node (it rented from us); negative: this node owes the peer.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			es, err := records(e, func(r api.Records) ([]api.LedgerEntry, error) { return r.Ledger(e.ctx) })
			if err != nil {
				return err
			}
			return e.printList(es, len(es), "the ledger is empty", func(w io.Writer) {
				fmt.Fprintln(w, "PEER\tBALANCE\tRECEIPTS")
				for _, l := range es {
					fmt.Fprintf(w, "%s\t%s %s\t%d\n", l.Peer, l.Balance, l.Currency, l.Receipts)
				}
			})
		},
	}
	addJSONFlag(c, e)
	return c
}

func newLogsCmd(e *env) *cobra.Command {
	var stream string
	c := &cobra.Command{
		Use:   "logs LEASE",
		Short: "Print a rented job's output, kept by 'idlegrid rent'",
		Long: `Print the stdout and stderr a rented job streamed back, as 'idlegrid rent'
kept them under the repository's logs/ folder.`,
		Example: `  idlegrid logs lease-4f2a…
  idlegrid logs lease-4f2a… --stream stderr`,
		Args: exactArgs(1, "LEASE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if stream != "stdout" && stream != "stderr" && stream != "both" {
				return usagef("--stream %q: want stdout, stderr or both", stream)
			}
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			r, err := repo.Open(e.repoPath())
			if err != nil {
				return err
			}
			found := false
			for _, s := range []string{"stdout", "stderr"} {
				if stream != "both" && stream != s {
					continue
				}
				b, err := os.ReadFile(renter.LogFile(filepath.Join(r.Path, repo.LogsDir), args[0], s))
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return err
				}
				found = true
				w := e.stdout
				if s == "stderr" {
					w = e.stderr
				}
				w.Write(b)
			}
			if !found {
				return fmt.Errorf("no output kept for lease %q in %s (see `idlegrid leases`)", args[0], filepath.Join(r.Path, repo.LogsDir))
			}
			return nil
		},
	}
	c.Flags().StringVar(&stream, "stream", "both", "stdout, stderr or both")
	return c
}

func newCancelCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "cancel LEASE",
		Short: "End a lease early: the provider stops the job, the receipt pays what ran",
		Long: `Cancel a lease before its term ends. As the renter: the provider is asked to
stop the job (SIGTERM, its grace, SIGKILL), and cancel returns once the
receipt both sides sign is kept here (the 'idlegrid rent' following it, if
one does, prints it too); the receipt meters to the cancel, not through the
grace. A provider that cannot be reached leaves the lease settling, as
'idlegrid leases' explains. As the provider: the job is stopped here.
Through the daemon when one runs, else as a light client.`,
		Args: exactArgs(1, "LEASE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := e.leaseArg(args, 0); err != nil {
				return err
			}
			var l api.LeaseView
			err := e.apiCall(func(c api.Node) (err error) { l, err = c.CancelLease(e.ctx, args[0]); return })
			if errors.Is(err, api.ErrNoDaemon) {
				n, done, lerr := e.lightNode(nil, false)
				if lerr != nil {
					return lerr
				}
				defer done()
				l, err = n.CancelLease(e.ctx, args[0])
			}
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(l)
			}
			inert.Strings(&l)
			switch {
			case l.Role == "provider":
				fmt.Fprintf(e.stdout, "lease %s: stopped here; its renter %s gets the receipt\n", l.ID, short(l.Renter))
			case l.State == views.LeaseSettling:
				fmt.Fprintf(e.stdout, "lease %s: cancelled, but its provider %s was not reached: it is settling (%s)\n", l.ID, short(l.Provider), l.Note)
			default:
				fmt.Fprintf(e.stdout, "lease %s: %s by its provider %s, with the receipt both signed (idlegrid receipts)\n", l.ID, l.State, short(l.Provider))
			}
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}

// settleNowFor bounds the settling of leases before a listing: a
// provider back stops a job it adopted within its stop grace (10 s by
// default), then the two sides exchange the receipt.
const settleNowFor = 45 * time.Second

// settleFirst, with no daemon running, settles this repository's open
// leases with their providers once, before a command shows them: one
// settling (a rent that gave up on its provider left it so, and exited)
// with a provider back, and one still open here (its rent was killed,
// or detached) that its provider has ended, each end with the receipt
// both sides keep, so the two sides' records agree. A lease still
// running is left alone. A daemon does this by itself.
func (e *env) settleFirst() {
	if _, err := e.status(); !errors.Is(err, api.ErrNoDaemon) {
		return
	}
	ls, err := records(e, func(r api.Records) ([]api.LeaseView, error) { return r.Leases(e.ctx) })
	if err != nil {
		return // the listing says why
	}
	settling, open := 0, 0
	for _, l := range ls {
		switch {
		case l.Role != "renter" || l.Ended:
		case l.State == views.LeaseSettling:
			settling++
		default:
			open++
		}
	}
	if settling+open == 0 {
		return
	}
	if settling > 0 {
		what := "1 lease with its provider"
		if settling > 1 {
			what = fmt.Sprintf("%d leases with their providers", settling)
		}
		fmt.Fprintf(e.stderr, "settling %s (up to %s)…\n", what, settleNowFor)
	}
	if e.logLvl == "" { // a listing's light node speaks only of trouble
		e.logLvl = "warn"
		defer func() { e.logLvl = "" }()
	}
	node, done, err := e.lightNode(nil, false)
	if err != nil {
		fmt.Fprintf(e.stderr, "idlegrid: not settled now: %s\n", oneLine(err))
		return
	}
	defer done()
	ctx, cancel := context.WithTimeout(e.ctx, settleNowFor)
	defer cancel()
	node.SettleNow(ctx)
}
