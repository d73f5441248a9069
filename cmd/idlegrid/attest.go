package main

import (
	"fmt"
	"strings"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

func newAttestCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "attest PEER",
		Short: "Challenge a provider to prove its GPUs, and show the verdict",
		Long: `Send PEER a fresh nonce over /idlegrid/attest/1.0.0 through the running daemon,
and verify the signed attestation it answers with: signature and signer, the
nonce, freshness (30 s), that its offer in the book claims only attested GPUs,
and what changed since its last attestation. Exit 0 with verified: false when
the attestation fails; the reason says why.`,
		Example: `  idlegrid attest 12D3KooW…
  idlegrid attest 12D3KooW… --json`,
		Args: exactArgs(1, "PEER"),
		RunE: func(_ *cobra.Command, args []string) error {
			var res api.AttestResult
			if err := e.apiCall(func(c *api.Client) (err error) {
				res, err = c.Attest(e.ctx, api.AttestRequest{Peer: args[0]})
				return
			}); err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(res)
			}
			if !res.Verified {
				fmt.Fprintf(e.stdout, "%s: NOT verified: %s\n", res.Peer, res.Reason)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s: verified in %.1f ms; driver %s, CUDA %s; %d GPUs; offer %s; confidential computing %s\n",
				res.Peer, res.RTTMillis, res.Driver, res.CUDA, len(res.GPUs), res.Offer, res.CC)
			for _, g := range res.GPUs {
				fmt.Fprintf(e.stdout, "  %s  %s  %d GiB  CC %s\n", g.UUID, g.Name, g.MemoryGiB, g.ComputeCapability)
			}
			if len(res.Changes) > 0 {
				fmt.Fprintf(e.stdout, "changed since the last attestation: %s\n", strings.Join(res.Changes, "; "))
			}
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}
