package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

// waitEvery is how often `wait` asks again.
const waitEvery = 100 * time.Millisecond

func newWaitCmd(e *env) *cobra.Command {
	var (
		timeout time.Duration
		peers   int
	)
	c := &cobra.Command{
		Use:   "wait",
		Short: "Wait until this repository's daemon is ready (and, with --peers, connected)",
		Long: `Wait until the daemon of the repository answers on its API, so that a
script can start one in the background and go on once it serves:

  idlegrid daemon --repo /tmp/a &
  idlegrid wait --repo /tmp/a && idlegrid id --repo /tmp/a

--peers N also waits until it is connected to N peers. wait exits 0 once
ready, and 1 with the last reason it was not when --timeout passes first.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if timeout <= 0 || timeout > time.Hour {
				return usagef("--timeout %s: want more than 0 and at most 1h", timeout)
			}
			if peers < 0 || peers > 10_000 {
				return usagef("--peers %d: want 0 to 10000", peers)
			}
			deadline := time.Now().Add(timeout)
			for {
				st, err := e.status()
				if err == nil && st.Peers < peers {
					err = fmt.Errorf("the daemon has %d peers, waiting for %d", st.Peers, peers)
				}
				if err == nil {
					if e.asJSON {
						return e.printJSON(map[string]any{"peer_id": st.PeerID, "peers": st.Peers, "ready": true})
					}
					return nil
				}
				if !errors.Is(err, api.ErrNoDaemon) && st.PeerID == "" {
					return err // no repository, a bad token: waiting will not help
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("not ready after %s: %w", timeout, err)
				}
				select {
				case <-e.ctx.Done():
					return e.ctx.Err()
				case <-time.After(waitEvery):
				}
			}
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait")
	c.Flags().IntVar(&peers, "peers", 0, "also wait until the daemon is connected to this many peers")
	addJSONFlag(c, e)
	return c
}
