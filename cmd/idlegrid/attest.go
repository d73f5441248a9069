package main

import (
	"fmt"
	"strings"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

func newAttestCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "attest PEER",
		Short: "Challenge a provider to prove its GPUs, and show the verdict",
		Long: `Send PEER a fresh nonce over /idlegrid/attest/1.0.0 through the running daemon,
and verify the signed attestation it answers with: signature and signer, the
nonce, freshness (30 s), each GPU's confidential-computing report (verified
when attest.cc_root_cert names NVIDIA's root certificate, else shown as
"present, not verified"), that its offer in the book claims only attested GPUs
and names by hash a standing attestation of the same hardware, and what
changed since its last attestation. Exit 1 when the attestation fails; the
reason says why (with --json, the verdict is printed first).`,
		Example: `  idlegrid attest 12D3KooW…
  idlegrid attest 12D3KooW… --json`,
		Args: exactArgs(1, "PEER"),
		RunE: func(_ *cobra.Command, args []string) error {
			var res api.AttestResult
			if err := e.apiCall(func(c api.Node) (err error) {
				res, err = c.Attest(e.ctx, api.AttestRequest{Peer: args[0]})
				return
			}); err != nil {
				return err
			}
			if e.asJSON {
				if err := e.printJSON(res); err != nil {
					return err
				}
			}
			if !res.Verified {
				return fmt.Errorf("%s: attestation NOT verified: %s", res.Peer, res.Reason)
			}
			if e.asJSON {
				return nil
			}
			inert.Strings(&res)
			fmt.Fprintf(e.stdout, "%s: verified in %.1f ms; driver %s, CUDA %s; %d GPUs; offer %s; confidential computing %s\n",
				res.Peer, res.RTTMillis, res.Driver, res.CUDA, len(res.GPUs), res.Offer, res.CC)
			for _, g := range res.GPUs {
				fmt.Fprintf(e.stdout, "  %s  %s  %d GiB  compute %s  confidential computing %s\n", g.UUID, g.Name, g.MemoryGiB, g.ComputeCapability, g.CC)
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
