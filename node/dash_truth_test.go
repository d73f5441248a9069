package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// layoutProblems is a JavaScript expression: what is wrong with the
// layout of the page shown now, one line a fault. The document must not
// scroll sideways; no element may reach out of its parent's box (uPlot's
// canvas stack, which positions its cursor off the plot, and a scrolling
// pre aside); and no two of the page's blocks (headings, lines, tables,
// charts, forms) may overlap.
const layoutProblems = `(() => {
  const bad = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) bad.push("the document is " + root.scrollWidth + " px wide in a " + root.clientWidth + " px window");
  const vis = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.trim().split(/\s+/).join(".") : "");
  const sec = document.querySelector("main > section:not([hidden])");
  const all = [document.querySelector("header"), ...document.querySelectorAll("header *"), sec, ...sec.querySelectorAll("*")];
  for (const e of all) {
    if (!vis(e) || e.closest(".u-wrap") || e.parentElement.closest("pre") || e.tagName === "OPTION") continue;
    const r = e.getBoundingClientRect(), p = e.parentElement.getBoundingClientRect();
    if (r.right > p.right + 1 || r.left < p.left - 1) bad.push(name(e) + " (" + Math.round(r.width) + " px) reaches out of " + name(e.parentElement) + " (" + Math.round(p.width) + " px)");
  }
  const blocks = [...sec.querySelectorAll("h2, p, table, .chart, form, pre, ul")].filter(vis);
  for (let i = 0; i < blocks.length; i++) for (let j = i + 1; j < blocks.length; j++) {
    const a = blocks[i], b = blocks[j];
    if (a.contains(b) || b.contains(a)) continue;
    const r = a.getBoundingClientRect(), s = b.getBoundingClientRect();
    const w = Math.min(r.right, s.right) - Math.max(r.left, s.left), h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
    if (w > 1 && h > 1) bad.push(name(a) + " overlaps " + name(b) + " by " + Math.round(w) + " × " + Math.round(h) + " px");
  }
  return bad;
})()`

// emptyProblems is a JavaScript expression: the tables of the page shown
// now with a header and nothing under it, and the charts with nothing
// drawn and nothing said.
const emptyProblems = `(() => {
  const vis = (e) => e.getClientRects().length > 0;
  const sec = document.querySelector("main > section:not([hidden])");
  return [...[...sec.querySelectorAll("table")].filter(vis).filter((t) => !t.tBodies[0] || !t.tBodies[0].textContent.trim()).map((t) => "table #" + t.id + " shows only its header"),
    ...[...sec.querySelectorAll(".chart")].filter(vis).filter((c) => !c.querySelector("canvas") && !c.textContent.trim()).map((c) => "chart #" + c.id + " is empty and says nothing")];
})()`

// wordingProblems is a JavaScript expression: the page's words that
// read wrong: a count of one in the plural, a figure of five decimals or
// more, jargon with nothing explained.
const wordingProblems = `(() => {
  const sec = document.querySelector("main > section:not([hidden])");
  const text = document.querySelector("header").innerText + "\n" + [...sec.children].filter((e) => e.tagName !== "PRE" && !e.querySelector("pre")).map((e) => e.innerText).join("\n");
  const bad = [];
  for (const [re, what] of [[/(^|[^\d.])1 (offers|peers|GPUs|beats|samples|receipts)\b/, "a count of one in the plural"], [/\d\.\d{5,}/, "a figure of five decimals or more"],
      [/:\s*--/, "a chart's legend reading --"], [/unknown, none/, "reachability as AutoNAT's bare words"], [/server provider|client provider/, "the DHT mode run into the role"]]) {
    const m = text.match(re);
    if (m) bad.push(what + ": " + JSON.stringify(text.slice(Math.max(0, m.index - 30), m.index + m[0].length + 30)));
  }
  return bad;
})()`

// chartProblems is a JavaScript expression of a chart's div id: its
// vertical axes too narrow for their tick labels and name (the name then
// drawn over the ticks), and, for a time axis, a span beyond maxDays or
// a point outside it.
func chartProblems(id string, maxDays int) string {
	return fmt.Sprintf(`((id, maxDays) => {
  const u = charts[id];
  if (!u) return [id + ": no chart"];
  const bad = [];
  const ctx = document.createElement("canvas").getContext("2d");
  for (const [i, a] of u.axes.entries()) {
    if (!a.show || a.side %% 2 === 0 || !a._values) continue;
    ctx.font = a.font[0];
    const widest = Math.max(0, ...a._values.map((v) => ctx.measureText(String(v)).width));
    const need = widest + a.ticks.size + a.gap + (a.label ? a.labelSize + (a.labelGap || 0) : 0);
    if (a._size < need) bad.push(id + ": axis " + i + " is " + a._size + " px, its labels" + (a.label ? " and its name " + JSON.stringify(a.label) : "") + " need " + Math.ceil(need));
  }
  const x = u.scales.x;
  if (x.time) {
    if ((x.max - x.min) / 86400 > maxDays) bad.push(id + ": the time axis spans " + new Date(x.min * 1000).toISOString() + " to " + new Date(x.max * 1000).toISOString());
    for (const t of u.data[0]) if (t < x.min || t > x.max) bad.push(id + ": a point at " + new Date(t * 1000).toISOString() + " lies off the axis");
  }
  return bad;
})(%s, %d)`, js(id), maxDays)
}

// holds waits up to d for the JavaScript expression problems (a list of
// faults) to come out empty, and fails the test with the faults it last
// found, and a screenshot, if it never does.
func (b *browser) holds(d time.Duration, what, problems string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void]("("+problems+").length === 0", chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err == nil {
		return
	}
	got := eval[[]string](b, problems)
	b.shot(strings.NewReplacer(" ", "-", "/", "-", ",", "").Replace(what))
	b.t.Errorf("%s:\n  %s", what, strings.Join(got, "\n  "))
}

// The dashboard tells the truth at any width (issue 31), as a renter and
// as a provider whose bronze tier sells below its base price: each price
// in the cheapest offers is the price of the tier it names; the cost so
// far of a lease is what its receipt then says, by the receipt's rule;
// the charts' axes fit their data and labels, and the GPU charts'
// legends read no "--"; a node that sells nothing says so rather than
// show empty charts and tables; counts agree with their nouns and no
// figure has six decimals; and at 800, 1024 and 1440 px wide no block
// overlaps another and nothing overflows.
func TestDashboardTellsTheTruthAtAnyWidth(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Provider.BronzePrice = "1.50"; c.Provider.GoldPrice = "2.50" })
	waitFor(t, 20*time.Second, "the renter's book holds the provider's offer", bookHolds(renter, 1))
	signIn(t, b, renter)
	row := fmt.Sprintf(`#cheapest tr[data-provider=%s]`, js(prov.id.String()))
	priceCell := fmt.Sprintf(`document.querySelector('%s td:nth-child(4)').textContent`, row)

	t.Run("each cheapest offer's price is its tier's", func(t *testing.T) {
		b := b.on(t)
		b.until(15*time.Second, "the provider's offer on the market page", fmt.Sprintf(`!!document.querySelector('%s')`, row))
		// No tier asked: listed at its cheapest, bronze, as the models
		// table and the histogram count it.
		if got := eval[string](b, priceCell); !strings.Contains(got, "1.50") || !strings.Contains(got, "bronze") {
			t.Errorf("with no tier asked the offer is listed at %q, want its bronze price 1.50, named", got)
		}
		if got := eval[string](b, `document.querySelector('#models tbody tr td:nth-child(5)').textContent`); !strings.Contains(got, "1.50") {
			t.Errorf("the models table's least price is %q, want 1.50", got)
		}
		b.do(10*time.Second, "ask for gold", chromedp.SetValue(`#offer-filters select[name=tier]`, "gold"), chromedp.Click(`#offer-filters button`))
		b.until(15*time.Second, "the offer at its gold price", fmt.Sprintf(`/2\.50/.test(%s)`, priceCell))
		if got := eval[string](b, priceCell); !strings.Contains(got, "gold") {
			t.Errorf("asked for gold, the offer is listed at %q, its tier unnamed", got)
		}
		b.do(10*time.Second, "any tier again", chromedp.SetValue(`#offer-filters select[name=tier]`, ""), chromedp.Click(`#offer-filters button`))
		b.until(15*time.Second, "the offer at its bronze price", fmt.Sprintf(`/1\.50/.test(%s)`, priceCell))
		// A quote of the one offer: its words and figures.
		b.do(10*time.Second, "quote", chromedp.SetValue(`#quote-form input[name=gpus]`, "H100"), chromedp.SetValue(`#quote-form input[name=max_price]`, "2.50"), chromedp.Click(`#quote-form button`))
		b.until(15*time.Second, "the quote's candidates", `!!document.querySelector('#candidates tbody tr')`)
		b.holds(5*time.Second, "the market page's words", wordingProblems)
		b.noErrors("market")
	})

	// A lease of one GPU, silver, from the renter; then cancelled.
	var lease string
	t.Run("cost so far is what the receipt says", func(t *testing.T) {
		b := b.on(t)
		req := api.RentRequest{BidRequest: api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, Tier: "silver", MaxPrice: "2.50", Image: image}, Command: []string{"sh", "-c", "sleep 600"}}
		rv, err := renter.StartRental(req)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the rental's lease", func() bool {
			for _, r := range renter.Rentals() {
				if r.ID == rv.ID && r.Lease != "" {
					lease = r.Lease
					return true
				}
			}
			return false
		})
		b.do(10*time.Second, "open the leases page", chromedp.Navigate(renter.APIAddr()+"/ui/#/leases"), chromedp.WaitVisible("#page-leases"))
		lrow := fmt.Sprintf(`document.querySelector('#leases tr[data-lease=%s]')`, js(lease))
		b.until(60*time.Second, "three beats on the page", fmt.Sprintf(`!!%s && +%s.cells[7].textContent >= 3`, lrow, lrow))
		// While it runs: the cost is the receipt's rule (market.Meter:
		// the price of the seconds to the last verified beat), for the
		// seconds the page says it metered.
		type cost struct{ Amount, Metered string }
		running := eval[cost](b, fmt.Sprintf(`({Amount: %s.cells[6].dataset.amount || "", Metered: %s.cells[6].dataset.metered || ""})`, lrow, lrow))
		var secs uint64
		if _, err := fmt.Sscan(running.Metered, &secs); err != nil || secs == 0 {
			t.Errorf("the running lease's cost %+v names no seconds metered", running)
		} else if want := market.FormatPrice(market.LeaseTotal(2_000_000, 1, secs)); running.Amount != want {
			t.Errorf("the running lease costs %q on the page for %d s; the receipt's rule says %s", running.Amount, secs, want)
		}
		if _, err := renter.CancelLease(context.Background(), lease); err != nil {
			t.Fatal(err)
		}
		rrow := fmt.Sprintf(`document.querySelector('#receipts tr[data-lease=%s]')`, js(lease))
		b.until(60*time.Second, "the receipt and the ended lease on the page", fmt.Sprintf(`!!%s && !!%s && !%s.querySelector('button.cancel')`, rrow, lrow, lrow))
		got := eval[[]string](b, fmt.Sprintf(`[%s.cells[6].textContent, %s.cells[3].textContent]`, lrow, rrow))
		if got[0] != got[1] {
			t.Errorf("the ended lease cost %q so far; its receipt says %q", got[0], got[1])
		}
		rcs, err := renter.Receipts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range rcs {
			if rc.LeaseID == lease {
				if shown := eval[string](b, lrow+`.cells[6].dataset.amount || ""`); shown != rc.Amount {
					t.Errorf("the ended lease's cost is %q; its receipt's amount %s", shown, rc.Amount)
				}
			}
		}
		b.holds(5*time.Second, "the leases page's words", wordingProblems)
		b.noErrors("leases")
	})

	t.Run("a renter's GPU page says what would fill it", func(t *testing.T) {
		b := b.on(t)
		b.do(10*time.Second, "open the GPUs page", chromedp.Navigate(renter.APIAddr()+"/ui/#/gpus"), chromedp.WaitVisible("#page-gpus"))
		b.until(10*time.Second, "the status read", `/sells no GPUs/.test(document.querySelector('#gpus-line').textContent)`)
		b.holds(5*time.Second, "the renter's GPU page, empty", emptyProblems)
		b.noErrors("gpus")
	})

	t.Run("the renter's pages at 800, 1024 and 1440 px", func(t *testing.T) { checkLayouts(t, b.on(t), "renter", renter) })

	signIn(t, b, prov)
	t.Run("the provider's charts fit their data", func(t *testing.T) {
		b := b.on(t)
		b.do(10*time.Second, "open the GPUs page", chromedp.Navigate(prov.APIAddr()+"/ui/#/gpus"), chromedp.WaitVisible("#page-gpus"))
		b.until(30*time.Second, "two readings charted and the day's earnings", `!!document.querySelector('#util-chart canvas') && charts['#util-chart'].data[0].length >= 2 && !!document.querySelector('#earn-chart canvas')`)
		b.holds(5*time.Second, "the earnings chart", chartProblems("#earn-chart", 31))
		b.holds(5*time.Second, "the utilisation chart", chartProblems("#util-chart", 1))
		b.holds(5*time.Second, "the power chart", chartProblems("#power-chart", 1))
		if legend := eval[string](b, `[...document.querySelectorAll('#util-chart .u-legend, #power-chart .u-legend')].map((l) => l.textContent).join(" ")`); strings.Contains(legend, "--") {
			t.Errorf("the GPU charts' legends read %q", legend)
		}
		b.holds(5*time.Second, "the provider's GPU page's words", wordingProblems)
		b.holds(5*time.Second, "the provider's GPU page, empty", emptyProblems)
		b.noErrors("gpus")
	})

	t.Run("the provider's pages at 800, 1024 and 1440 px", func(t *testing.T) { checkLayouts(t, b.on(t), "provider", prov) })
}

// checkLayouts shows each page of n's dashboard at 800, 1024 and 1440
// px wide, and checks that its layout holds once its data is in, and
// its words and empty parts; each is shot, as who (renter, provider),
// for a reader's eye.
func checkLayouts(t *testing.T, b *browser, who string, n *Node) {
	t.Helper()
	for _, w := range []int64{800, 1024, 1440} {
		b.do(10*time.Second, fmt.Sprintf("a window %d px wide", w), chromedp.EmulateViewport(w, 900))
		for _, page := range []string{"market", "swarm", "leases", "gpus"} {
			b.do(10*time.Second, "open "+page, chromedp.Navigate(n.APIAddr()+"/ui/#/"+page), chromedp.WaitVisible("#page-"+page))
			b.until(20*time.Second, page+"'s data", `document.querySelector('#live').textContent === 'live' && [...document.querySelectorAll('main > section:not([hidden]) tbody')].every((t) => t.offsetParent === null || t.rows.length > 0)`)
			b.holds(10*time.Second, fmt.Sprintf("%s at %d px", page, w), layoutProblems)
			b.holds(5*time.Second, fmt.Sprintf("%s's words at %d px", page, w), wordingProblems)
			b.holds(5*time.Second, fmt.Sprintf("%s's empty parts at %d px", page, w), emptyProblems)
			b.shot(fmt.Sprintf("%s-%s-%d", who, page, w))
		}
	}
	b.noErrors("layouts")
}
