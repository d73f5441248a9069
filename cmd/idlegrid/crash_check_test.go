package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/views"
)

// leases reads the provider's leases through its daemon.
func (c *crashTest) leases() map[string]api.LeaseView {
	c.t.Helper()
	ls, err := readJSON[[]api.LeaseView](c.bin, "leases", "--json", "--repo", c.prov)
	if err != nil {
		c.t.Fatalf("%v\nprovider log:\n%s", err, c.d.stderr)
	}
	out := make(map[string]api.LeaseView, len(ls))
	for _, l := range ls {
		if _, dup := out[l.ID]; dup {
			c.t.Errorf("lease %s listed twice by the provider", l.ID)
		}
		if l.Role != "provider" {
			c.t.Errorf("lease %s in the provider's repository has role %q", l.ID, l.Role)
		}
		out[l.ID] = l
	}
	return out
}

// providerGPUs is how many GPUs fake:dgxh100 sells.
const providerGPUs = 8

// check asserts what a restarted provider promises: every lease it ever
// showed is still there, once; an ended lease stays ended as it was; no
// lease is open past its end; the open leases hold no more GPUs than the
// provider has (each got its calendar slots back); and the engine holds
// containers only for recorded leases, one at most, none running for a
// lease that ended (one exited or being removed may linger a moment; the
// end of the test wants them all gone).
func (c *crashTest) check(round int) {
	c.t.Helper()
	const slack = 5 * time.Second // stop grace, the engine's stop, a beat
	before := c.leases()
	now := time.Now()
	for id, state := range c.seen {
		l, ok := before[id]
		switch {
		case !ok:
			c.t.Errorf("round %d: lease %s (%s) lost by the provider", round, id, state)
		case node.LeaseEnded(state) && l.State != state:
			c.t.Errorf("round %d: lease %s ended %s, now %s", round, id, state, l.State)
		}
	}
	var open []api.LeaseView
	for id, l := range before {
		c.seen[id] = l.State
		if node.LeaseEnded(l.State) {
			continue
		}
		if now.Sub(l.End) > slack {
			c.t.Errorf("round %d: lease %s still %s %s after its end", round, id, l.State, now.Sub(l.End).Round(time.Millisecond))
		}
		if len(l.Assigned) != int(l.GPUs) {
			c.t.Errorf("round %d: lease %s for %d GPUs was assigned %v", round, id, l.GPUs, l.Assigned)
		}
		open = append(open, l)
	}
	c.checkOverlaps(round, open)
	c.checkContainers(round, before)
}

// checkOverlaps asserts that no GPU is sold twice: two open leases that
// share one are apart in time. A lease accepted to start when another
// ends (or when a bronze one is preempted) shares GPUs, not time.
func (c *crashTest) checkOverlaps(round int, open []api.LeaseView) {
	c.t.Helper()
	gpus := map[string]bool{}
	for i, a := range open {
		for _, g := range a.Assigned {
			gpus[g] = true
		}
		for _, b := range open[i+1:] {
			shared := slices.ContainsFunc(a.Assigned, func(g string) bool { return slices.Contains(b.Assigned, g) })
			if shared && a.Start.Before(b.End) && b.Start.Before(a.End) {
				c.t.Errorf("round %d: leases %s (%s, %s–%s, %v) and %s (%s, %s–%s, %v) share GPUs at the same time", round,
					a.ID, a.State, a.Start.Format(time.StampMilli), a.End.Format(time.StampMilli), a.Assigned,
					b.ID, b.State, b.Start.Format(time.StampMilli), b.End.Format(time.StampMilli), b.Assigned)
			}
		}
	}
	if len(gpus) > providerGPUs {
		c.t.Errorf("round %d: open leases name %d GPUs; the provider has %d", round, len(gpus), providerGPUs)
	}
}

// running is whether a container in this state runs, or may run, its
// job; an exited one, or one the engine is removing, does not.
func running(state string) bool {
	return state != "exited" && state != "removing" && state != "dead"
}

// checkContainers asserts that every container on the engine belongs to
// a lease the provider recorded, one container per lease, and that none
// runs for a lease that had ended (in before, read first).
func (c *crashTest) checkContainers(round int, before map[string]api.LeaseView) {
	c.t.Helper()
	jobs, err := jobContainers(context.Background(), c.docker, c.peerID)
	if err != nil {
		c.t.Fatal(err)
	}
	after := c.leases()
	for id, states := range jobs {
		switch l, ok := after[id]; {
		case !ok:
			c.t.Errorf("round %d: container for lease %s the provider has no record of (%v)", round, id, states)
		case len(states) > 1:
			c.t.Errorf("round %d: lease %s runs in %d containers: %v", round, id, len(states), states)
		case node.LeaseEnded(before[id].State) && running(states[0]):
			c.t.Errorf("round %d: lease %s ended %s but its container is %s\nthe provider logged:\n%s", round, id, l.State, states[0], c.logOf(id))
		case node.LeaseEnded(before[id].State):
			c.t.Logf("round %d: lease %s ended %s, its container is still there, %s", round, id, l.State, states[0])
		}
	}
}

// recoveries tallies what the provider's restarts logged: leases adopted
// with their running container, ended as lost, or started afresh, jobs
// stopped for no lease, and warnings.
func (c *crashTest) recoveries() map[string]int {
	out := map[string]int{}
	for _, d := range c.daemons {
		for _, line := range strings.Split(d.stderr.String(), "\n") {
			var e struct {
				Level   string `json:"level"`
				Msg     string `json:"msg"`
				State   string `json:"state"`
				Adopted bool   `json:"adopted"`
				Lost    string `json:"lost"`
			}
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			switch {
			case e.Msg == "lease recovered" && e.Adopted:
				out[e.State+" adopted"]++
			case e.Msg == "lease recovered" && e.Lost != "":
				out[e.State+" lost: "+e.Lost]++
			case e.Msg == "lease recovered":
				out[e.State+" restarted"]++
			case strings.HasPrefix(e.Msg, "stopping a job no open lease"):
				out["orphan stopped"]++
			case e.Level == "WARN" || e.Level == "ERROR":
				out[e.Level+" "+e.Msg]++
			}
		}
	}
	return out
}

// settle lets every rent end, then asserts that every provider lease
// ended with a receipt the ledger settled once, that no container is left,
// and that the renters' records agree with the provider's.
func (c *crashTest) settle(seed int64) {
	t := c.t
	killed, own := c.waitRents()
	later := c.cancelUnstarted()
	ls := c.waitEnded(30*time.Second+later, seed)
	states := map[string]int{}
	for _, l := range ls {
		states[l.State]++
	}
	t.Logf("provider leases: %v", states)
	c.check(0)
	c.noContainers(10 * time.Second)
	receipts := c.checkReceipts(c.prov, ls, "provider")
	// With the provider up, each renter's records agree with its own
	// after one exchange: leases settles what a rent left settling.
	for _, repo := range c.renters {
		c.checkRenter(repo, killed[repo], own[repo], receipts, seed)
	}
	c.d.stop(t)
}

// cancelUnstarted withdraws, with `idlegrid cancel` from the renter's
// repository, every lease accepted to start later (once other leases
// end) whose rent was killed: nothing else would end it before its start.
// A started one ends by itself once its renter stays away, and so does
// one whose renter gave up on it (it counted the provider gone) once it
// starts: the returned wait covers the latest such start.
func (c *crashTest) cancelUnstarted() (later time.Duration) {
	t := c.t
	for id, l := range c.leases() {
		if l.State != views.LeaseAccepted || time.Until(l.Start) <= 0 {
			continue
		}
		for _, repo := range c.renters {
			mine := mustJSON[[]api.LeaseView](t, c.bin, "leases", "--json", "--repo", repo)
			i := slices.IndexFunc(mine, func(m api.LeaseView) bool { return m.ID == id })
			switch {
			case i < 0:
			case node.LeaseEnded(mine[i].State) || mine[i].State == views.LeaseSettling:
				t.Logf("lease %s starts in %s; its renter gave up on it: %s %s", id, time.Until(l.Start).Round(time.Second), mine[i].State, mine[i].Note)
				later = max(later, time.Until(l.Start))
			default:
				t.Logf("lease %s starts in %s and its rent was killed: %s", id, time.Until(l.Start).Round(time.Second),
					strings.TrimSpace(cli(t, c.bin, "cancel", id, "--repo", repo)))
			}
		}
	}
	return later
}

// waitEnded waits until every provider lease has ended and returns them;
// if one stays open, it fails with what the provider logged about it.
func (c *crashTest) waitEnded(within time.Duration, seed int64) []api.LeaseView {
	t := c.t
	var ls, open []api.LeaseView
	if poll(within, 100*time.Millisecond, func() bool {
		ls = mustJSON[[]api.LeaseView](t, c.bin, "leases", "--json", "--repo", c.prov)
		open = slices.DeleteFunc(slices.Clone(ls), func(l api.LeaseView) bool { return node.LeaseEnded(l.State) })
		return len(open) == 0
	}) {
		return ls
	}
	for _, l := range open {
		t.Errorf("lease %s still %s %s after every rent exited (seed %d): %+v\nthe provider logged:\n%s",
			l.ID, l.State, within, seed, l, c.logOf(l.ID))
	}
	t.FailNow()
	return nil
}

// noContainers waits until the engine holds no container of the
// provider's, all its leases having ended.
func (c *crashTest) noContainers(within time.Duration) {
	var jobs map[string][]string
	if poll(within, 100*time.Millisecond, func() bool {
		var err error
		if jobs, err = jobContainers(context.Background(), c.docker, c.peerID); err != nil {
			c.t.Fatal(err)
		}
		return len(jobs) == 0
	}) {
		return
	}
	for id, states := range jobs {
		c.t.Errorf("container of lease %s (%v) left %s after every lease ended\nthe provider logged:\n%s", id, states, within, c.logOf(id))
	}
}

// logOf is every line the provider's runs logged about a lease.
func (c *crashTest) logOf(id string) string {
	var b strings.Builder
	for i, d := range c.daemons {
		for _, line := range strings.Split(d.stderr.String(), "\n") {
			if strings.Contains(line, id) {
				fmt.Fprintf(&b, "run %d: %s\n", i+1, line)
			}
		}
	}
	return b.String()
}

// waitRents waits for every rent to exit and returns how many were
// killed, and how many kept a receipt of their own, by renter repository.
// One not killed exits with its job's code and a receipt both signed,
// with exitProviderLost and a receipt of its own (the lease settling), or
// with exitNoProvider (or 1) and the reason it got no lease.
func (c *crashTest) waitRents() (killed, own map[string]int) {
	t := c.t
	outcomes := map[string]int{}
	killed, own = map[string]int{}, map[string]int{}
	for _, p := range c.all {
		code := p.wait(t, 40*time.Second)
		lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
		switch {
		case p.killed:
			killed[p.repo]++
			outcomes["killed"]++
		case bothSigned(p.stderr.String(), code):
			outcomes["receipt both signed"]++
		case code == exitProviderLost && receiptAny.MatchString(p.stderr.String()):
			outcomes["receipt the renter alone signed"]++
			own[p.repo]++
			t.Logf("rent of round %d kept a receipt of its own:\n%s", p.round, strings.Join(lines[max(len(lines)-6, 0):], "\n"))
		case code == exitNoProvider || code == exitFailure || code == exitNothingFits: // nothing fits: the provider was down through the gather
			outcomes["no lease"]++
			why := lines[len(lines)-1]
			if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "idlegrid: tried ") }); i >= 0 {
				why = lines[i]
			}
			t.Logf("rent of round %d: %s", p.round, why)
		default:
			t.Errorf("rent of round %d exited %d:\n%s", p.round, code, p.stderr)
		}
	}
	t.Logf("rents: %v", outcomes)
	return killed, own
}

// bothSigned reports whether a rent's stderr holds a receipt both parties
// signed, whose job exit code is the rent's exit code.
func bothSigned(stderr string, code int) bool {
	m := receiptBoth.FindStringSubmatch(stderr)
	return m != nil && m[1] == strconv.Itoa(code)
}

var receiptBoth = regexp.MustCompile(`exit code (\d+), signed by renter and provider\n`)

var receiptAny = regexp.MustCompile(`idlegrid: lease lease-[0-9a-f]+ [a-z]+: \d+ s metered, [0-9.]+ USD, exit code -?\d+, signed by `)

// checkRenter asserts what a renter's records promise, read from its
// repository once no rent holds it, its provider up: the provider knows
// each of its leases; a receipt both signed is the one the provider
// holds; the ledger settled each receipt once; and none is left open or
// settling, since leases first closes, with the provider, a lease a
// killed rent left open and one a rent that kept a receipt of its own
// left settling.
func (c *crashTest) checkRenter(repo string, killed, own int, provider map[string]api.ReceiptView, seed int64) {
	t, name := c.t, filepath.Base(repo)
	ls := mustJSON[[]api.LeaseView](t, c.bin, "leases", "--json", "--repo", repo)
	open, settling := 0, 0
	for _, l := range ls {
		if _, ok := c.seen[l.ID]; !ok {
			t.Errorf("lease %s, recorded by %s, lost by the provider (seed %d)", l.ID, name, seed)
		}
		switch {
		case l.State == views.LeaseSettling:
			settling++
		case !node.LeaseEnded(l.State):
			open++
		}
	}
	if open > 0 {
		t.Errorf("%s: %d leases still open in its records (%d of its rents were killed), though the provider ended every lease: leases closes them first (seed %d)", name, open, killed, seed)
	}
	if settling > 0 {
		t.Errorf("%s: %d leases still settling with their provider up (%d of its rents kept a receipt of their own): leases settles them first (seed %d)", name, settling, own, seed)
	}
	var closed []api.LeaseView
	for _, l := range ls {
		if node.LeaseEnded(l.State) {
			closed = append(closed, l)
		}
	}
	for id, r := range c.checkReceipts(repo, closed, "renter") {
		if p := provider[id]; len(r.SignedBy) == 2 && (p.Amount != r.Amount || p.Outcome != r.Outcome || p.Beats != r.Beats) {
			t.Errorf("lease %s: %s's receipt both signed says %s %s (%d beats), the provider's %s %s (%d beats)",
				id, name, r.Outcome, r.Amount, r.Beats, p.Outcome, p.Amount, p.Beats)
		}
	}
	t.Logf("%s: %d leases, %d left open by a killed rent", name, len(ls), open)
}

// checkReceipts asserts that every ended lease in repo has one receipt,
// signed by this side (role), for the state it ended in, and that the
// ledger holds each receipt's amount once. It returns the receipts.
func (c *crashTest) checkReceipts(repo string, ended []api.LeaseView, role string) map[string]api.ReceiptView {
	t := c.t
	rs := mustJSON[[]api.ReceiptView](t, c.bin, "receipts", "--json", "--repo", repo)
	byLease := map[string]api.ReceiptView{}
	owed, count := map[string]int64{}, map[string]int{}
	for _, r := range rs {
		if _, dup := byLease[r.LeaseID]; dup {
			t.Errorf("%s: two receipts for lease %s", role, r.LeaseID)
		}
		byLease[r.LeaseID] = r
		peer, amount := r.Renter, parseAmount(t, r.Amount)
		if role == "renter" {
			peer, amount = r.Provider, -amount
		}
		owed[peer] += amount
		count[peer]++
	}
	for _, l := range ended {
		if r, ok := byLease[l.ID]; !ok || !slices.Contains(r.SignedBy, role) || r.Outcome != l.State {
			t.Errorf("%s: lease %s ended %s: receipt %+v (found %v)", role, l.ID, l.State, r, ok)
		}
	}
	for _, e := range mustJSON[[]api.LedgerEntry](t, c.bin, "ledger", "--json", "--repo", repo) {
		if got := parseAmount(t, e.Balance); got != owed[e.Peer] || e.Receipts != count[e.Peer] {
			t.Errorf("%s: ledger with %s: %s over %d receipts; the receipts sum to %d micros over %d", role, e.Peer, e.Balance, e.Receipts, owed[e.Peer], count[e.Peer])
		}
		delete(count, e.Peer)
	}
	if len(count) > 0 {
		t.Errorf("%s: receipts the ledger did not settle: %v", role, count)
	}
	return byLease
}
