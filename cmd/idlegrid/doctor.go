package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/doctor"
	"github.com/spf13/cobra"
)

func newDoctorCmd(e *env) *cobra.Command {
	var fake string
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check what a provider needs and say what to fix",
		Long: `Check, in order, what selling GPU time needs, and say for each what to do:

  repository           the identity key and API token readable by you only
  nvml                 the NVIDIA driver answers and lists the GPUs
  docker               a Docker engine answers (DOCKER_HOST, else the local socket)
  gpu runtime          the engine attaches GPUs (NVIDIA Container Toolkit or CDI)
  gpus in a container  a container given every GPU sees them all (nvidia-smi -L)
  disk for images      free space where the engine keeps images (20 GiB at least)
  ports                network.listen and api.port are free, or the daemon's
  reachability         how peers reach the running daemon: direct, relayed, not
  clock                this clock against the stamps of the swarm's offers

Each check is ok, warn, fail or skip (cannot be checked now, and why). The
last three ask the repository's running daemon and skip without one. Nothing
is changed. Exit status: 0 when no check fails, 1 when one does, so a script
or a systemd ExecStartPre can gate on it.`,
		Example: `  idlegrid doctor
  idlegrid doctor --json | jq '.[] | select(.status == "fail")'`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if fake != "" && !slices.Contains(attest.FakeMachines, fake) {
				return usagef("--fake %q: want one of %s", fake, strings.Join(attest.FakeMachines, ", "))
			}
			r, cfg, err := e.openRepo()
			if err != nil {
				return err
			}
			in := doctor.Input{Repo: r, Config: cfg, Fake: fake}
			if st, err := e.status(); err == nil {
				in.Daemon = &st
				_ = e.apiCall(func(c api.Node) error {
					in.Offers, err = c.Offers(e.ctx, api.OfferQuery{})
					return err
				})
			}
			checks := doctor.Run(e.ctx, in)
			failed := 0
			for _, c := range checks {
				if c.Status == doctor.CheckFail {
					failed++
				}
			}
			if e.asJSON {
				if err := e.printJSON(checks); err != nil {
					return err
				}
			} else if err := e.printList(checks, len(checks), "", func(w io.Writer) {
				fmt.Fprintln(w, "CHECK\tSTATUS\tDETAIL")
				for _, c := range checks {
					fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
					if c.Fix != "" {
						fmt.Fprintf(w, "\t\tfix: %s\n", c.Fix)
					}
				}
			}); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d checks failed", failed, len(checks))
			}
			return nil
		},
	}
	c.Flags().StringVar(&fake, "fake", "", "read one of go-nvml's mock machines instead of NVML: "+strings.Join(attest.FakeMachines, ", "))
	addJSONFlag(c, e)
	return c
}
