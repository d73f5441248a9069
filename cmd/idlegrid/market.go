package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/inert"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/spf13/cobra"
)

// apiCall runs f against the repository's daemon, turning a refused
// connection into the plain "no daemon is running" answer.
func (e *env) apiCall(f func(api.Node) error) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	err = f(c)
	if errors.Is(err, api.ErrNoDaemon) {
		return e.noDaemon(&repo.Repo{Path: e.repoPath()})
	}
	return err
}

func newOffersCmd(e *env) *cobra.Command {
	var (
		q       api.OfferQuery
		groupBy string
	)
	c := &cobra.Command{
		Use:   "offers",
		Short: "List the offers in the running daemon's book",
		Long: `List the signed offers this node's daemon has in its book, gossiped by the
providers of the swarm. Prices are per GPU-hour in the offer's currency.`,
		Example: `  idlegrid offers
  idlegrid offers --gpu H100 --min-vram 40 --region DE --max-price 2.50 --sort price
  idlegrid offers --group-by model          # the market at a glance: count, least and median price, regions
  idlegrid offers --gpu 4090 --where 'num_gpus>=2 down_mbps>=1000 cuda>=12.4'
  idlegrid offers --dataset bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi   # who keeps it
  idlegrid offers --sort rtt --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if q.MaxPrice != "" {
				if _, err := market.ParsePrice(q.MaxPrice); err != nil {
					return usagef("--max-price: %v", err)
				}
			}
			if _, err := market.ParseQuery(q.Where); err != nil {
				return usagef("--%v", err)
			}
			if groupBy != "" && groupBy != "model" {
				return usagef("--group-by %q: want model", groupBy)
			}
			var offers []api.OfferView
			if err := e.apiCall(func(c api.Node) (err error) { offers, err = c.Offers(e.ctx, q); return }); err != nil {
				return err
			}
			if groupBy == "model" {
				sum := summariseByModel(offers)
				return e.printList(sum, len(sum), "no offers match", func(w io.Writer) {
					fmt.Fprintln(w, "MODEL\tOFFERS\tGPUS\tFROM/GPU-H\tMEDIAN\tREGIONS")
					for _, m := range sum {
						fmt.Fprintf(w, "%s\t%d\t%d\t%s %s\t%s %s\t%s\n", m.Model, m.Offers, m.GPUs, m.MinPrice, m.Currency, m.Median, m.Currency, strings.Join(m.Regions, ","))
					}
				})
			}
			return e.printList(offers, len(offers), "no offers match", func(w io.Writer) {
				fmt.Fprintln(w, "PROVIDER\tGPUS\tREGION\tRTT\tPRICE/GPU-H\tTIERS\tDURATION\tEXPIRES\tRELIABILITY")
				for _, o := range offers {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s %s\t%s\t%s-%s\t%s\t%s\n", short(o.Provider), offerGPUs(o), region(o), rtt(o.RTTMillis, o.RTTSource), o.Price, o.Currency,
						strings.Join(o.Tiers, ","), o.MinDuration, o.MaxDuration, time.Until(o.Expires).Round(time.Second), o.Basis)
				}
			})
		},
	}
	f := c.Flags()
	f.StringVar(&q.GPU, "gpu", "", "GPU model or family in any common spelling, such as 4090 or H100")
	f.IntVar(&q.MinVRAMGiB, "min-vram", 0, "least memory per GPU, GiB")
	f.StringVar(&q.Country, "region", "", "country code, such as DE")
	f.StringVar(&q.MaxPrice, "max-price", "", "highest price per GPU-hour, such as 2.50")
	f.StringVar(&q.Tier, "tier", "", "gold, silver or bronze")
	f.StringVar(&q.Sort, "sort", "price", "order: "+strings.Join(api.OfferSorts, ", ")+" (total: the whole offer's price an hour; rtt: nearest first; reliability: most reliable first)")
	f.StringVar(&q.Where, "where", "", "hold offers to a query on their fields, terms joined by spaces: FIELD OP VALUE (< <= > >= = !=) or FIELD=LO..HI, such as 'num_gpus>=2 down_mbps>500 cuda>=12.4'; read of the offer whole: GPU terms on one of its groups the flags above admit, num_gpus counting those, host terms the whole host, price the listed one; fields: "+strings.Join(market.QueryFieldNames(), ", "))
	f.StringVar(&q.Dataset, "dataset", "", "only the offers of providers that keep the dataset of this CID (idlegrid dataset add prints one)")
	f.StringVar(&groupBy, "group-by", "", "summarise instead of listing: model (offers, GPUs, least and median price per GPU-hour, regions of each catalog model)")
	addJSONFlag(c, e)
	return c
}

// modelSummary is one line of offers --group-by model.
type modelSummary struct {
	Model    string   `json:"model"`
	Offers   int      `json:"offers"`
	GPUs     int      `json:"gpus"`
	Currency string   `json:"currency"`
	MinPrice string   `json:"min_price"`
	Median   string   `json:"median_price"`
	Regions  []string `json:"regions"` // most offers first
}

// summariseByModel groups offers by the catalog model of each GPU group
// (an offer of two models counts under both), per currency, cheapest
// model first.
func summariseByModel(offers []api.OfferView) []modelSummary {
	type key struct{ model, currency string }
	prices := map[key][]float64{}
	gpuCount := map[key]int{}
	regions := map[key]map[string]int{}
	for _, o := range offers {
		p, err := strconv.ParseFloat(o.Price, 64)
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, g := range o.GPUs {
			k := key{g.Model, o.Currency}
			gpuCount[k] += int(g.Count)
			if seen[g.Model] {
				continue
			}
			seen[g.Model] = true
			prices[k] = append(prices[k], p)
			if regions[k] == nil {
				regions[k] = map[string]int{}
			}
			regions[k][o.Country]++
		}
	}
	var out []modelSummary
	for k, ps := range prices {
		slices.Sort(ps)
		median := ps[len(ps)/2]
		if len(ps)%2 == 0 {
			median = (ps[len(ps)/2-1] + ps[len(ps)/2]) / 2
		}
		rs := slices.Collect(maps.Keys(regions[k]))
		slices.SortFunc(rs, func(a, b string) int { return cmp.Or(regions[k][b]-regions[k][a], cmp.Compare(a, b)) })
		out = append(out, modelSummary{Model: k.model, Offers: len(ps), GPUs: gpuCount[k], Currency: k.currency,
			MinPrice: strconv.FormatFloat(ps[0], 'f', -1, 64), Median: strconv.FormatFloat(median, 'f', -1, 64), Regions: rs})
	}
	slices.SortFunc(out, func(a, b modelSummary) int {
		pa, _ := strconv.ParseFloat(a.MinPrice, 64)
		pb, _ := strconv.ParseFloat(b.MinPrice, 64)
		return cmp.Or(cmp.Compare(a.Currency, b.Currency), cmp.Compare(pa, pb), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// candidateSorts are the orders quote --sort reorders its list in.
var candidateSorts = []string{"effective", "price", "total", "rtt", "reliability", "vram"}

// sortCandidates reorders the ranked candidates (ranks kept) by price,
// total, RTT (unknown last), reliability or VRAM (most first); effective
// is the matcher's own order.
func sortCandidates(cs []api.CandidateView, by string) {
	num := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	key := map[string]func(c *api.CandidateView) float64{
		"price": func(c *api.CandidateView) float64 { return num(c.Price) },
		"total": func(c *api.CandidateView) float64 { return num(c.Total) },
		"rtt": func(c *api.CandidateView) float64 {
			if c.Offer.RTTSource == "unknown" {
				return math.Inf(1)
			}
			return c.Offer.RTTMillis
		},
		"reliability": func(c *api.CandidateView) float64 { return -c.Offer.Reliability },
		"vram": func(c *api.CandidateView) float64 {
			var most uint64
			for _, g := range c.Offer.GPUs {
				most = max(most, g.VRAMGiB)
			}
			return -float64(most)
		},
	}[by]
	if key != nil {
		slices.SortStableFunc(cs, func(a, b api.CandidateView) int { return cmp.Compare(key(&a), key(&b)) })
	}
}

// bidFlags are the job needs shared by quote and bid.
func bidFlags(c *cobra.Command, req *api.BidRequest, gpu *string) {
	f := c.Flags()
	f.StringVar(gpu, "gpu", "", "GPU models or families accepted, comma-separated, in any common spelling: 4090, H100 SXM, h100 for any H100 (default: any; idlegrid gpus --catalog lists them)")
	f.StringVar(&req.FormFactor, "form-factor", "", "GPU form factor: "+strings.Join(gpus.FormFactors, ", ")+" (default: any)")
	f.BoolVar(&req.NVLink, "nvlink", false, "only GPUs joined by NVLink (SXM, NVL, or a bridge the provider declares)")
	f.IntVar(&req.Count, "count", 1, "GPUs wanted")
	f.StringVar(&req.Where, "where", "", "hold offers to a query on their fields besides the flags above, terms joined by spaces: FIELD OP VALUE (< <= > >= = !=) or FIELD=LO..HI, such as 'num_gpus>=2 down_mbps>500 cuda>=12.4 reliability>0.95'; fields: "+strings.Join(market.QueryFieldNames(), ", ")+" (this node's book only: a gossiped bid carries no query)")
	f.IntVar(&req.MinPerProvider, "min-per-provider", 0, "fewest GPUs from one provider (default: all of --count)")
	f.IntVar(&req.MinVRAMGiB, "min-vram", 0, "least memory per GPU, GiB")
	f.StringVar(&req.MinCompute, "min-compute", "", "least CUDA compute capability, such as 8.0")
	f.IntVar(&req.MinCPUCores, "min-cpu", 0, "least CPU cores for the lease: of the provider's host, the share its GPUs get (a lease of 2 of 8 GPUs gets a quarter) unless it sells the host whole")
	f.IntVar(&req.MinRAMGiB, "min-ram", 0, "least host RAM for the lease, GiB (a share, as --min-cpu)")
	f.IntVar(&req.MinDiskGiB, "min-disk", 0, "least disk for the lease, GiB (a share, as --min-cpu)")
	f.IntVar(&req.MinDownMbps, "min-down", 0, "least download bandwidth for the lease, Mbit/s (a share, as --min-cpu)")
	f.IntVar(&req.MinUpMbps, "min-up", 0, "least upload bandwidth for the lease, Mbit/s (a share, as --min-cpu)")
	f.Float64Var(&req.Hours, "hours", 1, "lease length in hours")
	f.StringVar(&req.Tier, "tier", "silver", "gold (reserved), silver (on demand) or bronze (preemptible)")
	f.StringVar(&req.MaxPrice, "max-price", "100", "highest price per GPU-hour")
	f.StringVar(&req.Currency, "currency", "USD", "currency of --max-price")
	f.StringSliceVar(&req.Regions, "region", nil, "country codes allowed (default: any)")
	f.StringSliceVar(&req.DenyRegions, "deny-region", nil, "country codes refused")
	f.IntVar(&req.MaxRTTMillis, "max-rtt", 0, "largest round-trip time to the provider, ms, measured or estimated from network coordinates; a provider with neither is refused (default: any)")
	f.Float64Var(&req.StartWithinHours, "start-within", 0, "hours from now within which the lease may start (default: now)")
	f.StringVar(&req.WorkloadClass, "workload", "", "workload class, such as training")
	f.StringVar(&req.Image, "image", "", "container image the job will run")
	latency := f.Float64("latency-weight", 0.5, "how much RTT raises a provider's effective price in the ranking: at 1, an RTT of 100 ms costs 100% more (0 to 10)")
	pre := c.PreRunE
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if _, err := market.ParsePrice(req.MaxPrice); err != nil || strings.HasPrefix(req.MaxPrice, "-") {
			return usagef("--max-price %s: want a price of 0 or more %s per GPU-hour, with at most 6 decimal places, such as 2.50", req.MaxPrice, cmp.Or(req.Currency, "USD"))
		}
		if cmd.Flags().Changed("latency-weight") {
			req.LatencyWeight = latency
		}
		if pre != nil {
			return pre(cmd, args)
		}
		return nil
	}
}

func splitGPUs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func newQuoteCmd(e *env) *cobra.Command {
	var (
		req    api.BidRequest
		gpu    string
		sortBy string
	)
	c := &cobra.Command{
		Use:   "quote",
		Short: "Rank the offers in the daemon's book for a job, or say why none fits",
		Long: `Run the matcher on the daemon's book for a job's needs: feasibility checks,
then a reverse auction by effective price (price raised for low reliability and
high latency). Prints the ranked candidates with the total cost, or, when
nothing fits, the constraint that blocks (the one whose moving alone lets the
most offers fit, with what they have: "the cheapest asks 0.1333/GPU-h"), the
models nearest the one asked with their prices for your count and host needs,
and how many offers failed each check. --explain counts those even when some
fit. Publishes nothing.`,
		Example: `  idlegrid quote --gpu A100 --count 2 --hours 4
  idlegrid quote --gpu H100,A100 --min-vram 80 --tier bronze --max-price 1.80 --region DE,FR
  idlegrid quote --gpu 4090 --count 2 --min-ram 64 --sort rtt
  idlegrid quote --gpu "RTX 4090 48GB" --max-price 0.40 --explain`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req.GPUs = splitGPUs(gpu)
			if !slices.Contains(candidateSorts, sortBy) { // a query field: the node ranks by it
				if _, _, err := renter.SortField(sortBy); err != nil {
					return usagef("--sort %q: want %s, or a query field (- after it for falling): %s", sortBy, strings.Join(candidateSorts, ", "), strings.Join(market.QueryFieldNames(), ", "))
				}
				req.Sort, sortBy = sortBy, "effective"
			}
			var res api.MatchResult
			if err := e.apiCall(func(c api.Node) (err error) { res, err = c.Match(e.ctx, req); return }); err != nil {
				return err
			}
			sortCandidates(res.Candidates, sortBy)
			if e.asJSON {
				return e.printJSON(res)
			}
			inert.Strings(&res)
			if len(res.Candidates) == 0 {
				fmt.Fprintf(e.stdout, "nothing fits: %s\n", res.Explanation)
				return nil
			}
			if res.Explained {
				fmt.Fprintf(e.stdout, "%d of %d offers fit; best first:\n", res.Feasible, res.Considered)
			} else {
				fmt.Fprintf(e.stdout, "the best %d, of %d offers checked (--explain counts the whole book):\n", len(res.Candidates), res.Considered)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "#\tPROVIDER\tGPUS\tREGION\tRTT\tPRICE/GPU-H\tEFFECTIVE\tTOTAL\tSTART\tRELIABILITY")
			for _, c := range res.Candidates {
				fmt.Fprintf(w, "%d\t%s\t%d of %s\t%s\t%s\t%s\t%s\t%s %s\t%s\t%s\n", c.Rank, short(c.Offer.Provider), c.GPUs, offerGPUs(c.Offer), region(c.Offer), rtt(c.Offer.RTTMillis, c.Offer.RTTSource),
					c.Price, c.EffectivePrice, c.Total, c.Offer.Currency, c.Start.Local().Format(time.DateTime), c.Offer.Basis)
				if c.Staging != "" {
					fmt.Fprintf(w, "\t  data: %s\n", c.Staging)
				}
			}
			return w.Flush()
		},
	}
	bidFlags(c, &req, &gpu)
	c.Flags().StringArrayVar(&req.Datasets, "dataset", nil, "CID of a dataset this node keeps that the job reads: a provider ranks by its price plus the time it would take to stage what it does not keep, at its declared download bandwidth (repeatable, up to 8)")
	c.Flags().BoolVar(&req.Explain, "explain", false, "count, per check, the whole book's offers that fail it, even when some fit (always when none does)")
	c.Flags().StringVar(&sortBy, "sort", "effective", "reorder the ranked candidates (their ranks kept): "+strings.Join(candidateSorts, ", ")+"; the ranking itself is by effective price; or rank every offer that fits by a query field, - after it for falling (tflops_per_usd-)")
	addJSONFlag(c, e)
	return c
}

func newBidCmd(e *env) *cobra.Command {
	var (
		req  api.BidRequest
		gpu  string
		wait time.Duration
	)
	c := &cobra.Command{
		Use:   "bid",
		Short: "Publish a signed bid to the swarm and collect providers' quotes",
		Long: `Sign a bid for a job's needs with this node's key, gossip it on the swarm's bids
topic, and wait for providers whose offers fit to answer with signed quotes.`,
		Example: `  idlegrid bid --gpu A100 --count 2 --hours 4 --max-price 2.50
  idlegrid bid --gpu H100 --tier bronze --wait 10s --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if wait <= 0 || wait > time.Minute {
				return usagef("--wait %s: want more than 0 and at most 1m", wait)
			}
			req.GPUs = splitGPUs(gpu)
			req.WaitMillis = int(wait.Milliseconds())
			if !e.asJSON {
				fmt.Fprintf(e.stderr, "placing the bid and collecting quotes for %s…\n", wait)
			}
			var res api.BidResult
			if err := e.apiCall(func(c api.Node) (err error) { res, err = c.PlaceBid(e.ctx, req); return }); err != nil {
				return err
			}
			if e.asJSON {
				return e.printJSON(res)
			}
			inert.Strings(&res)
			if len(res.Quotes) == 0 {
				fmt.Fprintf(e.stdout, "bid %s: no quotes within %s (try `idlegrid quote` with the same flags to see why)\n", res.BidID, wait)
				return nil
			}
			fmt.Fprintf(e.stdout, "bid %s: %d quotes\n", res.BidID, len(res.Quotes))
			w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "PROVIDER\tTIER\tGPUS\tPRICE/GPU-H\tTOTAL\tSTART\tVALID UNTIL")
			for _, q := range res.Quotes {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s %s\t%s\t%s\n", short(q.Provider), q.Tier, q.GPUs, q.Price, q.Total, q.Currency,
					q.Start.Local().Format(time.DateTime), q.Expires.Local().Format(time.TimeOnly))
			}
			return w.Flush()
		},
	}
	bidFlags(c, &req, &gpu)
	c.Flags().DurationVar(&wait, "wait", 3*time.Second, "how long to collect quotes")
	addJSONFlag(c, e)
	return c
}

func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-10:]
	}
	return id
}

func showGPUs(gs []api.GPUView) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = fmt.Sprintf("%d×%s %dG", g.Count, g.Model, g.VRAMGiB)
	}
	return strings.Join(parts, "+")
}

func region(o api.OfferView) string {
	s := o.Country
	if o.Label != "" {
		s += "/" + o.Label
	}
	if o.Implausible != "" {
		s += " (implausible)"
	}
	if o.RelayOnly {
		s += " (relayed)"
	}
	return s
}

// offerGPUs are an offer's GPUs, marked when no attestation backs them.
func offerGPUs(o api.OfferView) string {
	if !o.Attestable {
		return showGPUs(o.GPUs) + " (not attestable)"
	}
	return showGPUs(o.GPUs)
}

// rtt shows an RTT with where it came from: "42ms" measured, "~40ms"
// estimated from network coordinates, "-" unknown.
func rtt(ms float64, source string) string {
	switch source {
	case "measured":
		return millis(ms)
	case "estimated":
		return "~" + millis(ms)
	}
	return "-"
}

// millis writes a duration in milliseconds to two significant places or
// more: 0.04ms, 2.3ms, 42ms.
func millis(ms float64) string {
	switch {
	case ms < 1:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 10:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}
