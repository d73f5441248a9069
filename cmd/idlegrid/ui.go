package main

import (
	"fmt"
	"os/exec"
	"runtime"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/spf13/cobra"
)

func newUICmd(e *env) *cobra.Command {
	var (
		bootstrap []string
		open      string
	)
	c := &cobra.Command{
		Use:   "ui",
		Short: "Open the dashboard in a browser: the market, the swarm, your leases and GPUs",
		Long: `Open this node's dashboard, served by its local API under /ui/.

With a daemon running for the repository, ui prints (and, on a desktop,
opens) an address of the daemon's API that carries the API token once: the
browser trades it for a cookie (HttpOnly, SameSite=Strict) and the address
it lands on no longer holds it. Without a daemon, ui starts a light node on
the repository (or, without one, a throw-away identity), serves the
dashboard from it and runs until Ctrl-C: a renter needs nothing else.

The dashboard has four pages: Market (offers by model, the price
distribution, a quote form that explains why nothing fits), Swarm (peers on
the network-coordinate plane, RTTs, reachability, reputation, gossip
meshes), My leases (live output, telemetry beats, cost so far, cancel,
receipts and the ledger) and My GPUs (a provider's GPUs as NVML reads them,
its offer and pricing, fill rate and earnings). Updates are pushed by the
node as they happen (server-sent events); nothing is fetched from the
internet.

The address is a secret as the repository's api.token is: anyone who can
open it can act as this node.`,
		Example: `  idlegrid ui
  idlegrid ui --open=never            # print the address only
  idlegrid ui --json                  # {"url": …, "node": "daemon"}
  idlegrid ui --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if open != "auto" && open != "always" && open != "never" {
				return usagef("--open %q: want auto, always or never", open)
			}
			if c, err := e.client(); err == nil && len(bootstrap) == 0 {
				if _, err := c.Status(e.ctx); err == nil {
					return e.showUI(c.LoginURL(), "daemon", open)
				}
			}
			n, done, err := e.lightNode(bootstrap, false)
			if err != nil {
				return err
			}
			defer done()
			token, err := n.APIToken()
			if err != nil {
				return err
			}
			if err := e.showUI(api.LoginURL(n.APIAddr(), token), "light", open); err != nil {
				return err
			}
			if !e.asJSON {
				fmt.Fprintln(e.stderr, "serving the dashboard from a light node; Ctrl-C stops it")
			}
			<-e.ctx.Done()
			return nil
		},
	}
	c.Flags().StringSliceVar(&bootstrap, "bootstrap", nil, "start a light node that joins through these `MULTIADDRS` (default: the daemon's, else network.bootstrap)")
	addJSONFlag(c, e)
	c.Flags().StringVar(&open, "open", "auto", "open a browser: `auto` (where a desktop is), always, or never")
	return c
}

// showUI prints the dashboard's sign-in address, as JSON with --json, and
// opens it in a browser as open says.
func (e *env) showUI(url, kind, open string) error {
	if e.asJSON {
		if err := e.printJSON(map[string]string{"url": url, "node": kind}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "%s\n", url)
	}
	desktop := runtime.GOOS == "darwin" || e.getenv("DISPLAY") != "" || e.getenv("WAYLAND_DISPLAY") != ""
	if open == "never" || open == "auto" && !desktop {
		return nil
	}
	opener := "xdg-open"
	if runtime.GOOS == "darwin" {
		opener = "open"
	}
	cmd := exec.Command(opener, url)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		if open == "always" {
			return fmt.Errorf("open a browser with %s: %w; open the address above yourself", opener, err)
		}
		fmt.Fprintf(e.stderr, "could not open a browser (%v): open the address above\n", err)
		return nil
	}
	go cmd.Wait()
	return nil
}
