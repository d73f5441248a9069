package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/spf13/cobra"
)

var leaseSide = regexp.MustCompile(`^(lease-[0-9a-f]+(?:…|\.\.\.)?):(/.*)$`)

func newCpCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files into or out of a running lease's container, checked by SHA-256",
		Long: `Copy a file or folder into a running lease's container, or out of it: one
side is LEASE:/PATH, with PATH in /workspace (the container's one writable
folder, of the provider's size), the other a local path.

In, the copy is packed as a tar and uploaded to the provider, a broken
stream resumed from where the provider's copy ends (up to 5 streams); the
provider checks the tar's SHA-256 and unpacks it in the job with the
image's tar, as the job's user. Out, the provider packs the path with the
image's tar and cp downloads it, resuming from what arrived, and checks the
tar's SHA-256. Then every file's SHA-256 on the far side (the image's find
and sha256sum; busybox has them) is compared with this side's, and a
difference fails the copy. Only the lease's renter may, while its job
runs. Links, devices and names that would leave the destination are
refused on the way out.`,
		Example: `  idlegrid cp ./data lease-4f2a…:/workspace/data
  idlegrid cp lease-4f2a…:/workspace/out ./out`,
		Args: cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			up, down := leaseSide.FindStringSubmatch(args[1]), leaseSide.FindStringSubmatch(args[0])
			switch {
			case (up == nil) == (down == nil):
				return usagef("cp %s %s: name one side as LEASE:/PATH, the other a local path", args[0], args[1])
			case up != nil:
				if err := e.leaseArg(up, 1); err != nil {
					return err
				}
				return e.cpIn(args[0], up[1], up[2])
			default:
				if err := e.leaseArg(down, 1); err != nil {
					return err
				}
				return e.cpOut(down[1], down[2], args[1])
			}
		},
	}
}

// cpIn copies local into the lease's container at remote.
func (e *env) cpIn(local, lease, remote string) error {
	if _, err := os.Lstat(local); err != nil {
		return err
	}
	link, err := e.dialLease("cp", lease)
	if err != nil {
		return err
	}
	defer link.Close()
	dir, name := path.Dir(remote), path.Base(remote)
	pk, err := link.CopyIn(e.ctx, local, remote, e.say)
	if err != nil {
		return fmt.Errorf("cp %s %s:%s: %w", local, lease, remote, err)
	}
	sums, size := pk.Sums, pk.Bytes
	if err := e.verify(link, lease, dir, name, sums); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "idlegrid: copied %d files, %s, into %s:%s; SHA-256 checked\n", len(sums), views.FormatBytes(uint64(size)), lease, remote)
	return nil
}

// cpOut copies remote, in the lease's container, to local.
func (e *env) cpOut(lease, remote, local string) error {
	link, err := e.dialLease("cp", lease)
	if err != nil {
		return err
	}
	defer link.Close()
	dir, name := path.Dir(remote), path.Base(remote)
	// Into an existing folder, the copy goes inside it, as cp does.
	target := local
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		target = filepath.Join(local, name)
	}
	sums := map[string]string{}
	size, err := link.CopyOut(e.ctx, remote, target, sums, e.say)
	if err != nil {
		return fmt.Errorf("cp %s:%s: %w", lease, remote, err)
	}
	if err := e.verify(link, lease, dir, name, sums); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "idlegrid: copied %d files, %s, from %s:%s to %s; SHA-256 checked\n", len(sums), views.FormatBytes(uint64(size)), lease, remote, target)
	return nil
}

// say writes a progress line on stderr, inert (it may quote a peer).
func (e *env) say(format string, a ...any) {
	fmt.Fprintf(e.stderr, "idlegrid: %s\n", inert.Text(fmt.Sprintf(format, a...)))
}

// verify compares each file's SHA-256 in the container with sums.
func (e *env) verify(link *renter.LeaseLink, lease, dir, name string, sums map[string]string) error {
	var out, stderr bytes.Buffer
	code, err := link.Exec(e.ctx, &pb.ExecRequest{Argv: []string{"sh", "-c", `cd "$1" && find "$2" -type f -exec sha256sum {} +`, "sh", dir, name}},
		renter.ExecIO{Stdout: &out, Stderr: &stderr})
	if err := execFailed("sha256sum", code, err, &stderr); err != nil {
		return err
	}
	there := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if ok {
			there[path.Clean(file)] = sum
		}
	}
	var bad []string
	for file, sum := range sums {
		if there[file] != sum {
			bad = append(bad, file)
		}
	}
	if len(bad) > 0 || len(there) != len(sums) {
		sort.Strings(bad)
		return fmt.Errorf("cp: %d files here, %d in %s; SHA-256 differs for %v", len(sums), len(there), lease, bad)
	}
	return nil
}

// execFailed says why a command run for cp failed, if it did.
func execFailed(what string, code int, err error, stderr *bytes.Buffer) error {
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("cp: %s in the container exited with code %d: %s", what, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}
