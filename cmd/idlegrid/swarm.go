package main

import (
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

func newSwarmCmd(e *env) *cobra.Command {
	c := parentCmd("swarm", "Private swarm tools")
	c.AddCommand(&cobra.Command{
		Use:   "keygen",
		Short: "Write a new pre-shared key for a private swarm on stdout",
		Long: `Write a new 32-byte pre-shared key in the standard libp2p format
(/key/swarm/psk/1.0.0/, /base16/, 64 hex digits). Nodes holding the same
key talk only to each other; keep the file secret and give it to members.`,
		Example: `  (umask 077; idlegrid swarm keygen > swarm.key)   # readable by you alone
  idlegrid init --swarm lab-gpus --swarm-key swarm.key`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return repo.WriteNewSwarmKey(e.stdout)
		},
	})
	return c
}
