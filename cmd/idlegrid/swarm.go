package main

import (
	"bytes"
	"io"

	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"
)

func newSwarmCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "swarm",
		Short: "Private swarm tools",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(&cobra.Command{
		Use:   "keygen",
		Short: "Write a new pre-shared key for a private swarm on stdout",
		Long: `Write a new 32-byte pre-shared key in the standard libp2p format
(/key/swarm/psk/1.0.0/, /base16/, 64 hex digits). Nodes holding the same
key talk only to each other; keep the file secret and give it to members.`,
		Example: `  idlegrid swarm keygen > swarm.key
  idlegrid init --swarm lab-gpus --swarm-key swarm.key`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			key, err := p2p.GenerateSwarmKey()
			if err != nil {
				return err
			}
			return p2p.EncodeSwarmKey(e.stdout, key)
		},
	})
	return c
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func peerIDOf(key crypto.PrivKey) (string, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}
