package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// client finds the running daemon of the repository through the api file
// it writes at start, or says plainly that none runs.
func (e *env) client() (*api.Client, error) {
	r, err := repo.Open(e.repoPath())
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(r.Path, repo.APIFile))
	if err != nil {
		return nil, e.noDaemon(r)
	}
	token, err := r.APIToken()
	if err != nil {
		return nil, err
	}
	return api.NewClient(strings.TrimSpace(string(b)), token), nil
}

func (e *env) noDaemon(r *repo.Repo) error {
	return fmt.Errorf("%w for repository %s: start one with `idlegrid daemon --repo %s`", api.ErrNoDaemon, r.Path, r.Path)
}

// status asks the daemon, turning "connection refused" from a stale api
// file into the same plain answer.
func (e *env) status() (st api.Status, err error) {
	err = e.apiCall(func(c api.Node) (err error) { st, err = c.Status(e.ctx); return })
	return st, err
}

func newIDCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "id",
		Short: "Print this node's peer ID and, if its daemon runs, its addresses",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			st, err := e.status()
			if errors.Is(err, api.ErrNoDaemon) {
				return e.idFromRepo()
			}
			if err != nil {
				return err
			}
			addrs := make([]string, 0, len(st.Announced))
			for _, a := range st.Announced {
				addrs = append(addrs, a+"/p2p/"+st.PeerID)
			}
			if e.asJSON {
				return e.printJSON(map[string]any{"peer_id": st.PeerID, "addrs": addrs, "daemon": true})
			}
			fmt.Fprintln(e.stdout, st.PeerID)
			for _, a := range addrs {
				fmt.Fprintln(e.stdout, a)
			}
			return nil
		},
	}
	addJSONFlag(c, e)
	return c
}

func (e *env) idFromRepo() error {
	r, err := repo.Open(e.repoPath())
	if err != nil {
		return err
	}
	pid, err := r.PeerID()
	if err != nil {
		return err
	}
	id := pid.String()
	if e.asJSON {
		return e.printJSON(map[string]any{"peer_id": id, "addrs": []string{}, "daemon": false})
	}
	fmt.Fprintln(e.stdout, id)
	fmt.Fprintf(e.stderr, "no daemon is running for %s, so no addresses: start one with `idlegrid daemon --repo %s`\n", r.Path, r.Path)
	return nil
}

func newStatusCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "Ask the running daemon how it is",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			st, err := e.status()
			if err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(st)
			}
			inert.Strings(&st)
			w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "peer\t%s\n", st.PeerID)
			fmt.Fprintf(w, "swarm\t%s (private: %v)\n", st.SwarmID, st.Private)
			fmt.Fprintf(w, "profile\t%s, DHT %s mode\n", st.Profile, st.Mode)
			fmt.Fprintf(w, "version\t%s\n", st.Version)
			fmt.Fprintf(w, "uptime\t%s\n", (time.Duration(st.UptimeSec) * time.Second).String())
			fmt.Fprintf(w, "peers\t%d connected, %d in the DHT routing table\n", st.Peers, st.RoutingTable)
			loc := st.Location
			if loc == "" {
				loc = "unknown (set network.location to check the regions providers claim)"
			}
			fmt.Fprintf(w, "location\t%s\n", loc)
			settled := "settled: RTTs to unmeasured peers are estimated"
			if st.Coordinate.Error > 1 {
				settled = "not settled yet: no RTT is estimated"
			}
			fmt.Fprintf(w, "reachable\t%s\n", reachLine(st.Reachability))
			fmt.Fprintf(w, "coordinate\terror %.2f (%s), %d samples, %d outliers refused\n", st.Coordinate.Error, settled, st.Coordinate.Samples, st.Coordinate.Outliers)
			for _, a := range st.Listen {
				fmt.Fprintf(w, "listen\t%s\n", a)
			}
			for _, a := range st.Observed {
				fmt.Fprintf(w, "observed\t%s\n", a)
			}
			for _, t := range slices.Sorted(maps.Keys(st.Topics)) {
				fmt.Fprintf(w, "topic\t%s: %d peers, %d in mesh\n", t, st.Topics[t].Peers, st.Topics[t].Mesh)
			}
			l := st.Leases
			fmt.Fprintf(w, "leases\t%d active, %d ended\n", len(l.Active), l.Ended)
			if l.GPUsOffered > 0 {
				fmt.Fprintf(w, "utilisation\t%d of %d offered GPUs leased now (%.0f%%), %d booked ahead\n", l.GPUsLeased, l.GPUsOffered, 100*l.Utilisation, l.GPUsBooked)
			}
			for _, a := range l.Active {
				fmt.Fprintf(w, "lease\t%s %s %s: %d GPUs %s until %s\n", a.ID, a.Role, a.State, a.GPUs, a.Tier, a.End.Local().Format(time.DateTime))
			}
			if len(l.Earned) > 0 {
				fmt.Fprintf(w, "earned\t%s\n", strings.Join(l.Earned, ", "))
			}
			if len(l.Spent) > 0 {
				fmt.Fprintf(w, "spent\t%s\n", strings.Join(l.Spent, ", "))
			}
			if p := st.Pricing; p != nil {
				printPricing(w, p)
			}
			return w.Flush()
		},
	}
	addJSONFlag(c, e)
	return c
}

// printPricing shows a provider's prices, what its policy would set now,
// its fill rate per window and its earnings per day.
func printPricing(w io.Writer, p *api.PricingStatus) {
	rule := p.Policy + ": the configured prices"
	if p.Rule != "" {
		rule = p.Policy + ": " + p.Rule
	}
	fmt.Fprintf(w, "pricing\t%s, in %s\n", rule, p.Currency)
	for _, t := range p.Tiers {
		from := ""
		if p.Policy == "market" {
			from = fmt.Sprintf(" from %d comparable offers", t.Comparable)
		}
		fmt.Fprintf(w, "price\t%s %s/GPU-h; the policy would set %s now%s\n", t.Tier, t.Price, t.WouldSet, from)
	}
	since := p.Since.Local().Format(time.DateTime)
	for _, f := range p.Fill {
		peak := ""
		if f.Peak {
			peak = " (peak)"
		}
		fmt.Fprintf(w, "fill\t%s%s: %.1f of %.1f GPU-hours leased (%.0f%%) since %s\n", f.Window, peak, f.LeasedHours, f.OfferedHours, 100*f.Rate, since)
	}
	var days []string
	for _, d := range p.EarnedPerDay {
		days = append(days, d.Day+" "+d.Amount)
	}
	fmt.Fprintf(w, "earnings\t%s %s/day (%s)\n", p.EarnedDaily, p.Currency, strings.Join(days, ", "))
}

func newPeersCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "peers",
		Short: "List the running daemon's connected peers with their RTT",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			var peers []api.Peer
			if err := e.apiCall(func(c api.Node) (err error) { peers, err = c.Peers(e.ctx); return }); err != nil {
				return err
			}
			return e.printList(peers, len(peers), "no peers connected", func(w io.Writer) {
				fmt.Fprintln(w, "PEER\tRTT\tESTIMATED\tCOORD-ERR\tNEAR\tDIR\tAGENT\tSINCE\tADDRESS")
				for _, p := range peers {
					addr := ""
					if len(p.Addrs) > 0 {
						addr = p.Addrs[0]
					}
					measured, est, coordErr := "-", "-", "-"
					if p.RTTMillis > 0 {
						measured = millis(p.RTTMillis)
					}
					if p.EstimatedMillis > 0 {
						est = millis(p.EstimatedMillis)
					}
					switch {
					case p.OutlierCoord:
						coordErr = "outlier"
					case p.CoordError >= 0:
						coordErr = fmt.Sprintf("%.2f", p.CoordError)
					}
					near := ""
					if p.Near {
						near = "near"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, measured, est, coordErr, near, p.Direction, p.Agent, p.ConnectedSince.Local().Format(time.TimeOnly), addr)
				}
			})
		},
	}
	addJSONFlag(c, e)
	return c
}

// reachLine says how peers reach the node, and what to do when they
// cannot.
func reachLine(r api.Reachability) string {
	switch {
	case r.How == api.ReachDirect:
		return "directly (" + r.State + ")"
	case r.How == api.ReachRelayed:
		return "through relays only: renters reach it, and connections turn direct by hole punching where the NATs allow"
	case r.State == "private":
		return "no: behind a NAT and no relay reservation yet (nat.auto_relay takes one on a public daemon of the swarm; forward a port or set network.announce to be reached directly)"
	case r.State == "unknown" || r.State == "":
		return "not known yet (AutoNAT asks peers to dial back)"
	}
	return r.State + ", " + r.How
}
