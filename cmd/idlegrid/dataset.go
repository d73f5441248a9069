package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

func newDatasetCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "dataset",
		Short: "Keep datasets by content address: add, ls, pin, unpin, rm",
		Long: `A dataset is a file or folder imported into this node's datastore as a UnixFS
DAG (CIDv1, 1 MiB chunks, raw leaves) and named by its CID: the same bytes
get the same CID on every node, and every block is checked against it.

A dataset is cached, or pinned. The datasets kept here take at most
datasets.cache_gib of disk (64 GiB by default), pinned and cached together:
past it, the cached ones used longest ago are evicted, never a pinned one
nor one a lease uses. A dataset larger than the bound is refused. Blocks
two datasets share are kept once. A dataset holds files and folders only:
a symbolic link or a device in it is refused, naming it.

Through the daemon when one runs (it reads the path on its own machine),
else on the repository itself.`,
		Example: `  idlegrid dataset add ./weights --pin
  idlegrid dataset add ./private --encrypt
  idlegrid dataset ls --json
  idlegrid dataset unpin bafybei…
  idlegrid dataset rm bafybei…`,
	}
	var pin, encrypt bool
	add := &cobra.Command{
		Use:   "add PATH",
		Short: "Import a file or folder; prints its CID",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			path, err := filepath.Abs(args[0])
			if err != nil {
				return usagef("PATH %q: %v", args[0], err)
			}
			start := time.Now()
			if !e.asJSON {
				fmt.Fprintf(e.stderr, "importing %s…\n", path)
			}
			d, err := records(e, func(r api.Records) (api.DatasetView, error) {
				return r.AddDataset(e.ctx, api.DatasetAdd{Path: path, Pin: pin, Encrypt: encrypt})
			})
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(d)
			}
			fmt.Fprintf(e.stderr, "added %s: %s in %d blocks, %s, in %s\n", d.Name, sizeOf(d.Bytes), d.Blocks, keptAs(d), time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(e.stdout, d.CID)
			return nil
		},
	}
	add.Flags().BoolVar(&pin, "pin", false, "keep it whatever datasets.cache_gib (else it is cached, and may be evicted)")
	add.Flags().BoolVar(&encrypt, "encrypt", false, "encrypt it before it is hashed (age: X25519, ChaCha20-Poly1305), as one tar of its names and bytes, under a fresh key kept here: a provider that caches or relays its blocks cannot read them; a lease's provider gets the key sealed to its identity, and decrypts it into the job's memory alone")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the datasets kept here, least recently used first",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ds, err := records(e, func(r api.Records) ([]api.DatasetView, error) { return r.Datasets(e.ctx) })
			if err != nil {
				return err
			}
			return e.printList(ds, len(ds), "no datasets", func(w io.Writer) {
				fmt.Fprintln(w, "CID\tNAME\tSIZE\tBLOCKS\tKEPT\tUSED")
				for _, d := range ds {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", d.CID, d.Name, sizeOf(d.Bytes), d.Blocks, keptAs(d), d.Used.Local().Format(time.DateTime))
				}
			})
		},
	}
	one := func(use, short string, do func(r api.Records, cid string) (api.DatasetView, error), said string) *cobra.Command {
		c := &cobra.Command{
			Use:   use + " CID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(_ *cobra.Command, args []string) error {
				d, err := records(e, func(r api.Records) (api.DatasetView, error) { return do(r, args[0]) })
				if err != nil {
					return err
				}
				if e.asJSON {
					return e.printJSON(d)
				}
				fmt.Fprintf(e.stdout, "%s %s (%s, %s)\n", said, d.CID, d.Name, sizeOf(d.Bytes))
				return nil
			},
		}
		addJSONFlag(c, e)
		return c
	}
	pinCmd := one("pin", "Keep a dataset whatever the cache's bound", func(r api.Records, c string) (api.DatasetView, error) { return r.PinDataset(e.ctx, c, true) }, "pinned")
	unpin := one("unpin", "Return a dataset to the cache, where it may be evicted", func(r api.Records, c string) (api.DatasetView, error) { return r.PinDataset(e.ctx, c, false) }, "unpinned")
	rm := one("rm", "Remove a dataset no lease uses, pinned or not", func(r api.Records, c string) (api.DatasetView, error) { return r.RemoveDataset(e.ctx, c) }, "removed")
	for _, s := range []*cobra.Command{add, ls} {
		addJSONFlag(s, e)
	}
	c.AddCommand(add, ls, pinCmd, unpin, rm)
	return c
}

// keptAs says how a dataset is kept.
func keptAs(d api.DatasetView) string {
	kept := "cached"
	if d.Pinned {
		kept = "pinned"
	}
	if d.Encrypted {
		kept += ", encrypted"
	}
	return kept
}

// sizeOf is n bytes for people.
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div, exp = div*unit, exp+1
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
