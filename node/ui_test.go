package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// signIn opens n's dashboard through the address 'idlegrid ui' prints,
// and checks the browser lands on it with the token gone from the URL.
func signIn(t testing.TB, b *browser, n *Node) {
	t.Helper()
	token, err := n.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	b.do(20*time.Second, "sign in", chromedp.Navigate(api.LoginURL(n.APIAddr(), token)), chromedp.WaitVisible("#page-market"))
	if loc := eval[string](b, "location.href"); loc != n.APIAddr()+"/ui/" {
		t.Fatalf("signed in at %q, want %s/ui/ (the token kept out of the address)", loc, n.APIAddr())
	}
}

// In a real browser, against a provider selling 8 fake H100s through a
// real Docker engine, a bootstrap node and a light renter: every page
// loads without an error and shows the swarm's real offers and peers; a
// quote from the form is the API's quote; a rental from the page streams
// its output live onto the lease page and a cancel from the page ends it;
// a page of another origin cannot make the API act.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	image := executortest.BusyboxImage(t)
	prov, renter := leaseSwarm(t, nil)
	waitFor(t, 20*time.Second, "the renter's book holds the provider's offer", bookHolds(renter, 1))

	signIn(t, b, renter)

	// Market: the provider's offer, by model and in the cheapest list.
	b.until(15*time.Second, "the provider's offer on the market page", fmt.Sprintf(`!!document.querySelector('#cheapest tr[data-provider=%s]')`, js(prov.id.String())))
	if got := eval[string](b, `document.querySelector('#models tbody tr').dataset.model`); got != "H100 SXM" {
		t.Errorf("models table starts with %q, want H100 SXM", got)
	}
	b.until(5*time.Second, "the price chart", `!!document.querySelector('#price-chart canvas')`)
	b.shot("market")
	b.noErrors("market")
	// The filters' query: the provider's eight GPUs are not sixteen.
	listed := fmt.Sprintf(`document.querySelector('#cheapest tr[data-provider=%s]')`, js(prov.id.String()))
	b.do(10*time.Second, "filter by a query", chromedp.SetValue(`#offer-filters input[name=where]`, "num_gpus>=16"), chromedp.Click(`#offer-filters button`))
	b.until(15*time.Second, "the offer filtered out", "!"+listed)
	b.do(10*time.Second, "filter by another", chromedp.SetValue(`#offer-filters input[name=where]`, "num_gpus>=8 gpu_ram>=80"), chromedp.Click(`#offer-filters button`))
	b.until(15*time.Second, "the offer back", "!!"+listed)
	b.noErrors("market filtered")

	// A quote from the form is the one the API gives.
	req := api.BidRequest{GPUs: []string{"H100"}, Count: 2, Hours: 1, Tier: "silver", MaxPrice: "2.50"}
	b.do(10*time.Second, "fill the quote form",
		chromedp.SetValue(`#quote-form input[name=gpus]`, "H100"), chromedp.SetValue(`#quote-form input[name=count]`, "2"),
		chromedp.SetValue(`#quote-form input[name=hours]`, "1"), chromedp.SetValue(`#quote-form input[name=max_price]`, "2.50"),
		chromedp.Click(`#quote-form button`))
	b.until(15*time.Second, "the quote's candidates", `!!document.querySelector('#candidates tbody tr')`)
	want, err := renter.Match(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Provider, Offer, Price string }
	got := eval[[]row](b, `[...document.querySelectorAll('#candidates tbody tr')].map(r => ({Provider: r.dataset.provider, Offer: r.dataset.offer, Price: r.dataset.price}))`)
	var wantRows []row
	for _, c := range want.Candidates {
		wantRows = append(wantRows, row{c.Offer.Provider, c.Offer.ID, c.Price})
	}
	if !slices.Equal(got, wantRows) || len(got) == 0 {
		t.Errorf("the page quotes %+v; the API %+v", got, wantRows)
	}
	// Nothing fits: the page shows the API's explanation, check by check.
	b.do(10*time.Second, "quote what nothing fits", chromedp.SetValue(`#quote-form input[name=count]`, "64"), chromedp.Click(`#quote-form button`))
	b.until(15*time.Second, "the explanation", `!!document.querySelector('#quote-none')`)
	req.Count = 64
	none, err := renter.Match(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	checks := eval[[]string](b, `[...document.querySelectorAll('#quote-none li')].map(li => li.dataset.check)`)
	var wantChecks []string
	for _, r := range none.Reasons {
		wantChecks = append(wantChecks, r.Check)
	}
	if len(none.Candidates) != 0 || !slices.Equal(checks, wantChecks) || len(checks) == 0 ||
		!strings.Contains(eval[string](b, `document.querySelector('#quote-none').textContent`), none.Explanation) {
		t.Errorf("the page explains %q; the API %q (%s)", checks, wantChecks, none.Explanation)
	}
	b.shot("quote")
	b.noErrors("quote")

	// Rent from the page: its output reaches the lease page while the job
	// runs, and the page's cancel ends the lease.
	b.do(10*time.Second, "rent from the page", chromedp.SetValue(`#quote-form input[name=count]`, "2"), chromedp.Click(`#quote-form button`))
	b.until(15*time.Second, "the rent form", `!document.querySelector('#rent-form').hidden && !!document.querySelector('#candidates')`)
	b.do(10*time.Second, "submit the rent form", chromedp.SetValue(`#rent-form input[name=image]`, image),
		chromedp.SetValue(`#rent-form input[name=command]`, `i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo "line $i"; sleep 0.2; done`),
		chromedp.Click(`#rent-form button`))
	b.until(60*time.Second, "live output on the lease page", `location.hash === '#/leases' && /line 3\n/.test(document.querySelector('#output').textContent)`)
	lease := eval[string](b, `document.querySelector('#output-lease').textContent`)
	if lv, err := renter.Lease(context.Background(), lease); err != nil || lv.Ended {
		t.Fatalf("lease %s shown live, but it is %+v (%v)", lease, lv, err)
	}
	b.shot("leases")
	b.do(10*time.Second, "cancel from the page", chromedp.Click(fmt.Sprintf(`button.cancel[data-lease=%s]`, js(lease))))
	b.until(5*time.Second, "the cancel asks once more", fmt.Sprintf(`document.querySelector('button.cancel[data-lease=%s]').textContent === 'Stop the job?'`, js(lease)))
	b.do(10*time.Second, "confirm the cancel", chromedp.Click(fmt.Sprintf(`button.cancel[data-lease=%s]`, js(lease))))
	b.until(60*time.Second, "the lease's end on the page", `!!document.querySelector('#output-end')`)
	lv, err := renter.Lease(context.Background(), lease)
	if err != nil || !lv.Ended || lv.State != "cancelled" {
		t.Errorf("after the page's cancel the lease is %+v (%v), want cancelled", lv, err)
	}
	b.until(15*time.Second, "the receipt listed", fmt.Sprintf(`!!document.querySelector('#receipts tr[data-lease=%s]')`, js(lease)))
	b.shot("leases-ended")
	b.noErrors("leases")

	// Swarm: the peers the renter is connected to, by ID.
	b.do(10*time.Second, "open the swarm page", chromedp.Navigate(renter.APIAddr()+"/ui/#/swarm"), chromedp.WaitVisible("#page-swarm"))
	for _, p := range renter.Peers() {
		b.until(15*time.Second, "peer "+p.ID, fmt.Sprintf(`!!document.querySelector('#peers tr[data-peer=%s]')`, js(p.ID)))
	}
	b.until(15*time.Second, "the gossip topics", `document.querySelectorAll('#topics tbody tr').length >= 2`)
	b.shot("swarm")
	b.noErrors("swarm")

	// My GPUs, on the provider's own dashboard: its 8 GPUs and its offer.
	signIn(t, b, prov)
	b.do(10*time.Second, "open the GPUs page", chromedp.Navigate(prov.APIAddr()+"/ui/#/gpus"), chromedp.WaitVisible("#page-gpus"))
	b.until(15*time.Second, "8 GPUs read", `document.querySelectorAll('#gpus tbody tr[data-uuid]').length === 8`)
	b.until(15*time.Second, "the published offer", `/8 × H100 SXM/.test(document.querySelector('#own-offer').textContent)`)
	b.until(15*time.Second, "the pricing table", `document.querySelectorAll('#pricing tbody tr').length === 3`)
	b.shot("gpus")
	b.noErrors("gpus")

	// A page of another origin, in the same browser, signed in to the
	// renter's dashboard: neither a JSON POST (it needs a preflight the
	// API never grants) nor a plain form POST makes the API act.
	before := len(renter.Rentals())
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<!doctype html><title>evil</title><script>
fetch(`+js(renter.APIAddr()+"/v1/rentals")+`, {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"}, body: JSON.stringify({image: "x", gpus: ["H100"], count: 1, hours: 1, tier: "silver", max_price: "9"})})
  .then(r => { document.title = "answered " + r.status; }, e => { document.title = "refused"; });
fetch(`+js(renter.APIAddr()+"/v1/rentals")+`, {method: "POST", mode: "no-cors", credentials: "include", headers: {"Content-Type": "text/plain"}, body: "{}"}).then(() => {}, () => {});
</script>`)
	}))
	defer evil.Close()
	b.do(15*time.Second, "open a page of another origin", chromedp.Navigate(evil.URL))
	b.until(15*time.Second, "the other origin's fetch to settle", `document.title !== 'evil'`)
	if title := eval[string](b, "document.title"); title != "refused" {
		t.Errorf("another origin's JSON POST with the cookie: %s, want refused", title)
	}
	b.errors() // that page's refused fetches are its own errors
	if after := len(renter.Rentals()); after != before {
		t.Errorf("another origin's page started a rental: %d rentals, were %d", after, before)
	}
}

// Outside a browser, the dashboard's rules: no token, no page; the token
// in the address once buys the cookie; a change with the cookie must carry
// this origin's Origin.
func TestTheDashboardAsksForTheToken(t *testing.T) {
	t.Parallel()
	n := startNode(t, testRepo(t, "ui", nil), Options{Light: true})
	token, err := n.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr map[string]string) *http.Response {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"image": "x", "count": 1, "hours": 1, "tier": "silver", "max_price": "1.00"}`)
		}
		req, _ := http.NewRequest(method, n.APIAddr()+path, body)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		r, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/v1/events", "/v1/rentals", "/v1/leases/x/output"} {
		if r := do("GET", path, nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %s", path, r.Status)
		}
	}
	if r := do("GET", "/ui/login?token=wrong", nil); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Errorf("a wrong token: %s, cookies %v", r.Status, r.Cookies())
	}
	r := do("GET", "/ui/login?token="+token, nil)
	cookies := r.Cookies()
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/ui/" || len(cookies) != 1 {
		t.Fatalf("the login: %s to %q, cookies %v", r.Status, r.Header.Get("Location"), cookies)
	}
	c := cookies[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Value != token || c.Name != api.CookieName(strings.TrimPrefix(n.APIAddr(), "http://")) {
		t.Errorf("the cookie %+v", c)
	}
	cookie := c.Name + "=" + c.Value
	r = do("GET", "/ui/", map[string]string{"Cookie": cookie})
	if r.StatusCode != http.StatusOK || !strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("the page with the cookie: %s, CSP %q", r.Status, r.Header.Get("Content-Security-Policy"))
	}
	json := map[string]string{"Cookie": cookie, "Content-Type": "application/json"}
	if r := do("POST", "/v1/rentals", json); r.StatusCode != http.StatusForbidden {
		t.Errorf("a change with the cookie and no Origin: %s", r.Status)
	}
	json["Origin"] = "http://127.0.0.1:1"
	if r := do("POST", "/v1/rentals", json); r.StatusCode != http.StatusForbidden {
		t.Errorf("a change with the cookie from another port's origin: %s", r.Status)
	}
	json["Origin"] = n.APIAddr()
	if r := do("POST", "/v1/rentals", json); r.StatusCode != http.StatusAccepted {
		t.Errorf("a change with the cookie from the dashboard's origin: %s", r.Status)
	}
	if r := do("POST", "/ui/login?token="+token, json); r.StatusCode == http.StatusSeeOther {
		t.Errorf("a POST to the login answered as a login")
	}
}

// fillBook puts k offers of strangers into n's book: 6 models, 1 to 8
// GPUs, prices from 0.50 to 4.49 in 12 countries.
func fillBook(t *testing.T, n *Node, k int) { fillBookTB(t, n, k) }

func fillBookTB(t testing.TB, n *Node, k int) {
	t.Helper()
	models := []struct {
		model string
		vram  int
	}{{"H100 SXM", 80}, {"A100 SXM 80GB", 80}, {"RTX 4090", 24}, {"L40S", 48}, {"A10", 24}, {"RTX 3090", 24}}
	countries := []string{"US", "DE", "FR", "GB", "NL", "SE", "PL", "JP", "KR", "SG", "CA", "BR"}
	now := n.clock.Now()
	for i := range k {
		cfg := config.DefaultProviderConfig()
		m := models[i%len(models)]
		cfg.GPUs = []config.GPUConfig{{Model: m.model, Count: 1 + i%8, VRAMGiB: m.vram, ComputeCapability: "8.0", Interconnect: "pcie"}}
		cfg.Price = fmt.Sprintf("%.2f", 0.5+float64(i*7919%400)/100)
		cfg.Country = countries[i%len(countries)]
		key, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(key)
		o, err := offer.Build(cfg, id, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.market.Book.PutOffer(o, now); err != nil {
			t.Fatal(err)
		}
	}
}

// The market page with 10,000 offers in the book paints the market (its
// summary line, tables and chart) on every reload with the node's
// summary cache cold, within the page's wait, without an error; each
// reload is logged with its parts. How fast is a figure, not a
// guarantee a machine shared with the rest of the suite keeps (the best
// of 9 reloads took 336 ms beside stress-ng, against 300 ms on a quiet
// machine): BenchmarkMarketPageFirstPaint measures it.
func TestMarketPageFirstPaintWith10kOffers(t *testing.T) {
	fp := measureFirstPaint(t, 10_000, 9)
	t.Logf("first paint of the market page with %d offers: median %s of %d reloads (%v ms); the API call alone: %s the first, median %s of the next 5 (%d bytes); page weight %.1f KiB: %s",
		fp.offers, fp.median().Round(time.Millisecond), len(fp.paints), fp.paints, fp.first.Round(100*time.Microsecond), fp.call.Round(10*time.Microsecond), fp.size, fp.weight/1024, fp.parts)
	t.Logf("reloads, ms from navigation start: %s", strings.Join(fp.loads, "; "))
}

// BenchmarkMarketPageFirstPaint times the first paint of the market
// page with 10,000 offers in the book, each load with the node's summary
// cache cold: the best and the median of 9 reloads, in ms from the
// navigation's start to the browser's paint of the frame that first
// shows the market (Element Timing's renderTime), and the median's ratio
// to the API call it waits on, timed alone in the same run (the first,
// cold, call). On a quiet 2-core machine, with the compositor
// rasterising in software, the best was under 300 ms and the median
// under 600 ms.
//
//	IDLEGRID_REQUIRE_BROWSER=1 go test ./node -run '^$' -bench MarketPageFirstPaint -benchtime 1x
func BenchmarkMarketPageFirstPaint(b *testing.B) {
	for range b.N {
		fp := measureFirstPaint(b, 10_000, 9)
		b.ReportMetric(fp.paints[0], "best-paint-ms")
		b.ReportMetric(float64(fp.median())/float64(time.Millisecond), "median-paint-ms")
		b.ReportMetric(float64(fp.median())/float64(fp.first), "x-api-call")
		b.Logf("reloads, ms from navigation start: %s", strings.Join(fp.loads, "; "))
	}
}

// firstPaint is what measureFirstPaint measured.
type firstPaint struct {
	offers      int
	paints      []float64     // of each reload, ms from navigation start, sorted
	loads       []string      // each reload's paint and parts, in order
	first, call time.Duration // the API call alone: the first (cold), the median of the next 5
	size        int           // the API call's response, bytes
	weight      float64       // the page's, bytes
	parts       string        // the page's weight by resource
}

func (fp firstPaint) median() time.Duration {
	return time.Duration(fp.paints[len(fp.paints)/2] * float64(time.Millisecond))
}

// measureFirstPaint starts a light node with offers in its book and a
// browser signed in to its dashboard, and reloads the market page
// reloads times, each with the node's summary cache cold.
func measureFirstPaint(t testing.TB, offers, reloads int) firstPaint {
	t.Helper()
	fp := firstPaint{offers: offers}
	b := newBrowser(t)
	n := startNode(t, testRepo(t, "market", nil), Options{Light: true})
	fillBookTB(t, n, offers)
	if got := n.market.Snapshot().Len(); got != offers {
		t.Fatalf("the book holds %d offers, want %d", got, offers)
	}
	// The API call alone, as the page makes it: the first of them walks
	// the book; the node then serves that summary, for one snapshot of
	// the book and at most 2 s, to the next.
	get := func() (time.Duration, int) {
		t0 := time.Now()
		r, err := http.Get(n.APIAddr() + "/v1/market?limit=20")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return time.Since(t0), len(body)
	}
	fp.first, fp.size = get()
	var call []time.Duration
	for range 5 {
		d, _ := get()
		call = append(call, d)
	}
	slices.Sort(call)
	fp.call = call[2]

	signIn(t, b, n) // a first load: the browser has the assets cached
	b.until(15*time.Second, "the market", `!!document.querySelector('#cheapest tr[data-provider]')`)
	// The page's weight, as this first visit fetched it whole (a reload
	// revalidates the assets and is answered 304 Not Modified).
	type weight struct {
		Name  string
		Bytes float64
	}
	res := eval[[]weight](b, `[performance.getEntriesByType('navigation')[0], ...performance.getEntriesByType('resource')].map(e => ({Name: e.name.replace(location.origin, ''), Bytes: e.decodedBodySize}))`)
	var parts []string
	for _, w := range res {
		fp.weight += w.Bytes
		parts = append(parts, fmt.Sprintf("%s %.1f KiB", w.Name, w.Bytes/1024))
	}
	fp.parts = strings.Join(parts, ", ")

	// Each reload's paint, and its parts, in ms from the navigation's
	// start: the page's HTML received, its scripts run (DOMContentLoaded),
	// the summary's response received, and the page's own marks: the
	// summary parsed, the tables filled, the chart drawn.
	type load struct{ Paint, HTML, Scripts, API, Data, Tables, Chart float64 }
	for range reloads {
		// Cold: the node walks its book for this load's summary.
		n.marketCache.mu.Lock()
		n.marketCache.snap = nil
		n.marketCache.mu.Unlock()
		b.do(20*time.Second, "reload the market page", chromedp.Navigate(n.APIAddr()+"/ui/#/market"), chromedp.Reload())
		b.until(15*time.Second, "the market painted", `window.marketPainted > 0`)
		l := eval[load](b, `(() => {
			const nav = performance.getEntriesByType('navigation')[0];
			const api = performance.getEntriesByType('resource').find((e) => e.name.includes('/v1/market'));
			const mark = (name) => { const m = performance.getEntriesByName(name); return m.length ? m[0].startTime : -1; };
			return {Paint: window.marketPainted, HTML: nav.responseEnd, Scripts: nav.domContentLoadedEventEnd, API: api ? api.responseEnd : -1,
				Data: mark('market:data'), Tables: mark('market:tables'), Chart: mark('market:chart')};
		})()`)
		fp.paints = append(fp.paints, l.Paint)
		fp.loads = append(fp.loads, fmt.Sprintf("%.0f (html %.0f, scripts %.0f, api %.0f, data %.0f, tables %.0f, chart %.0f)", l.Paint, l.HTML, l.Scripts, l.API, l.Data, l.Tables, l.Chart))
	}
	slices.Sort(fp.paints)
	b.noErrors("market")
	return fp
}

// The dashboard's streams and rentals are bounded: the 33rd open stream is
// answered 429, the 5th rental running at once 503, and neither is kept.
func TestDashboardStreamsAndRentalsAreBounded(t *testing.T) {
	t.Parallel()
	n := startNode(t, testRepo(t, "bounds", nil), Options{Light: true})
	token, err := n.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.APIAddr()+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 32 {
		r := open()
		if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d: %s %s", i+1, r.Status, r.Header.Get("Content-Type"))
		}
		defer r.Body.Close()
	}
	if r := open(); r.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the 33rd stream: %s", r.Status)
	} else {
		r.Body.Close()
	}

	rent := api.RentRequest{BidRequest: api.BidRequest{GPUs: []string{"H100"}, Count: 1, Hours: 1, Tier: "silver", MaxPrice: "2.00", Image: "x"}, GatherMillis: 60_000}
	for i := range maxRentalsRunning {
		if _, err := n.StartRental(rent); err != nil {
			t.Fatalf("rental %d: %v", i+1, err)
		}
	}
	if _, err := n.StartRental(rent); err == nil || !strings.Contains(err.Error(), "4 rentals are running already") {
		t.Errorf("a 5th rental at once: %v", err)
	}
	if got := len(n.Rentals()); got != maxRentalsRunning {
		t.Errorf("%d rentals listed, want %d", got, maxRentalsRunning)
	}
	for _, c := range []struct {
		edit func(*api.RentRequest)
		want string
	}{
		{func(r *api.RentRequest) { r.Uploads = []api.Upload{{Local: "/etc", Path: "/x"}} }, "uploads: a rental through the API cannot have it"},
		{func(r *api.RentRequest) { r.Image = "" }, "image: name the container image to run"},
		{func(r *api.RentRequest) { r.Detach = true }, "detach: a rental through the API cannot have it"},
	} {
		r := rent
		c.edit(&r)
		if _, err := n.StartRental(r); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("StartRental: %v, want an invalid request %q", err, c.want)
		}
	}
}

// The market summary agrees with the book: per model, the counts and
// prices of FindOffers' listing; the cheapest in its order.
func TestMarketSummaryAgreesWithTheListing(t *testing.T) {
	t.Parallel()
	n := startNode(t, testRepo(t, "summary", nil), Options{Light: true})
	fillBook(t, n, 3000)
	for _, q := range []api.OfferQuery{{}, {GPU: "h100"}, {Country: "DE"}, {Tier: "silver", MaxPrice: "2.00"}, {Where: "num_gpus>=4 price<3"}} {
		sum, err := n.Market(q, 25)
		if err != nil {
			t.Fatal(err)
		}
		list, err := n.Offers(q)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Offers != len(list) || len(list) == 0 {
			t.Fatalf("%+v: summary of %d offers, listing of %d", q, sum.Offers, len(list))
		}
		for i, v := range sum.Cheapest {
			if v.Provider != list[i].Provider || v.ID != list[i].ID {
				t.Errorf("%+v: cheapest #%d is %s/%s, the listing's %s/%s", q, i, v.Provider, v.ID, list[i].Provider, list[i].ID)
			}
		}
		prices := map[string][]uint64{}
		for _, v := range list {
			p, err := market.ParsePrice(v.Price)
			if err != nil {
				t.Fatal(err)
			}
			prices[v.GPUs[0].Model] = append(prices[v.GPUs[0].Model], p)
		}
		total := 0
		for _, m := range sum.Models {
			total += m.Offers
			ps := prices[m.Model]
			slices.Sort(ps)
			want := api.ModelSummary{Model: m.Model, Offers: len(ps), GPUs: m.GPUs, Providers: len(ps),
				Min: market.FormatPrice(ps[0]), Median: market.FormatPrice(market.Percentile(ps, 50)), P90: market.FormatPrice(market.Percentile(ps, 90))}
			if m != want || ps[0] == ps[len(ps)-1] {
				t.Errorf("%+v: model %+v, the listing's %+v", q, m, want)
			}
		}
		hist := 0
		for _, c := range sum.Histogram.Counts {
			hist += c
		}
		if total != sum.Priced || hist != sum.Priced || sum.Currency != "USD" {
			t.Errorf("%+v: models sum to %d, histogram to %d, of %d priced in %q", q, total, hist, sum.Priced, sum.Currency)
		}
	}
}

func TestPriceHistogram(t *testing.T) {
	if h := views.PriceHistogram(nil); len(h.Counts) != 0 {
		t.Errorf("no prices: %+v", h)
	}
	// One price sits in the middle of a chart of cents.
	h := views.PriceHistogram([]uint64{2_000_000, 2_000_000})
	if h.From != 1.80 || h.Width != 0.01 || h.Counts[20] != 2 {
		t.Errorf("one price: from %v width %v, counts %v", h.From, h.Width, h.Counts)
	}
	// Near zero, the chart starts at zero.
	if h := views.PriceHistogram([]uint64{50_000}); h.From != 0 || h.Counts[5] != 1 {
		t.Errorf("5 cents: from %v, counts %v", h.From, h.Counts)
	}
	// A spread from 0.50 to 4.49 and one absurd price: 40 bins of about
	// 10 cents from the least, the absurd one in the last.
	var prices []uint64
	for c := range 400 {
		prices = append(prices, uint64(500_000+c*10_000))
	}
	prices = append(prices, 1_000_000_000)
	h = views.PriceHistogram(prices)
	total := 0
	for _, c := range h.Counts {
		total += c
	}
	if h.From != 0.5 || h.Width < 0.099 || h.Width > 0.1 || total != len(prices) || h.Counts[0] < 9 || h.Counts[39] < 2 {
		t.Errorf("a spread: from %v width %v, counts %v", h.From, h.Width, h.Counts)
	}
}
