package market

import (
	"math/rand/v2"
	"testing"
)

// FuzzBookStateMachine runs the book's state machine (book_machine_test.go)
// on operations decoded from the fuzzer's bytes: each choice takes one
// byte (two where it has more than 256 answers), and a run ends when the
// bytes do. The seeds include the replacements that once crashed a node
// (TestABookNeverPanicsWhenABucketEmptiesBetweenSnapshots), buckets cut
// into probe chunks, a full book, and mixed runs. Run it with
//
//	go test -run '^$' -fuzz=FuzzBookStateMachine -fuzztime=10m ./market
func FuzzBookStateMachine(f *testing.F) {
	for _, seed := range machineSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runMachine(t, &byteChooser{data: data})
	})
}

// A fuzzed run is bounded, so an input runs in well under a second: at
// most fuzzSteps operations and fuzzOffers offers put in bulk.
const (
	fuzzSteps  = 100
	fuzzOffers = 1200
)

func runMachine(t failer, c *byteChooser) {
	t.Helper()
	m := newBookMachine(t, c)
	m.bounded, m.budget = true, fuzzOffers
	for range fuzzSteps {
		if len(c.data) == 0 {
			return
		}
		m.do(c.choose("op", nOps), c)
	}
}

// byteChooser reads choices from bytes, big-endian in as many bytes as
// the largest answer needs; past the end it reads zeros.
type byteChooser struct{ data []byte }

func (c *byteChooser) choose(_ string, n int) int {
	v := 0
	for w := n - 1; w > 0; w >>= 8 {
		v <<= 8
		if len(c.data) > 0 {
			v |= int(c.data[0])
			c.data = c.data[1:]
		}
	}
	return v % max(n, 1)
}

// recorder makes the choices of script (or of r, where it is not nil),
// and writes them as byteChooser reads them.
type recorder struct {
	init  map[string]int // choices before the first operation
	steps []scriptStep
	set   map[string]int
	r     *rand.Rand
	out   []byte
}

// scriptStep is an operation and the choices it makes other than 0.
type scriptStep struct {
	op  int
	set map[string]int
}

func (c *recorder) choose(label string, n int) int {
	var v int
	switch {
	case c.r != nil:
		v = c.r.IntN(max(n, 1))
	case label == "op":
		v, c.set, c.steps = c.steps[0].op, c.steps[0].set, c.steps[1:]
	case c.set != nil:
		v = min(c.set[label], n-1)
	default:
		v = min(c.init[label], n-1)
	}
	var b []byte
	for w, x := n-1, v; w > 0; w, x = w>>8, x>>8 {
		b = append([]byte{byte(x)}, b...)
	}
	c.out = append(c.out, b...)
	return v
}

// recordRun runs the machine on c's choices and returns them as bytes.
func recordRun(t failer, c *recorder, ops int) []byte {
	t.Helper()
	m := newBookMachine(t, c)
	m.bounded, m.budget = true, fuzzOffers
	if c.r == nil {
		ops = len(c.steps)
	}
	for range ops {
		m.do(c.choose("op", nOps), c)
	}
	return c.out
}

func repeat(n int, s scriptStep) []scriptStep {
	out := make([]scriptStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func machineSeeds(t failer) [][]byte {
	t.Helper()
	var steps [][]scriptStep
	// One offer replaced 33 times with no snapshot: the crash.
	steps = append(steps, append(append([]scriptStep{{op: opPut}}, repeat(33, scriptStep{op: opReplace})...), scriptStep{op: opSnapshot}))
	// 33 offers withdrawn with no snapshot.
	steps = append(steps, []scriptStep{
		{op: opBulkPut, set: map[string]int{"bulk_n": 32}},
		{op: opBulkChange, set: map[string]int{"change_n": 32, "change_how": 1}},
		{op: opMatch},
	})
	// A bucket cut into probe chunks, churned, re-priced, emptied.
	steps = append(steps, []scriptStep{
		{op: opBulkPut, set: map[string]int{"bulk_big": 3, "bulk_n_big": 699}},
		{op: opSnapshot, set: map[string]int{"hold": 1}},
		{op: opReplace}, // one chunk changes; the others are shared
		{op: opSnapshot},
		{op: opBulkChange, set: map[string]int{"change_n": 150, "change_from": 300, "change_how": 2}},
		{op: opMatch, set: map[string]int{"k": 3}},
		{op: opBulkPut, set: map[string]int{"bulk_big": 3, "bulk_n_big": 600, "spread": 3}},
		{op: opBulkChange, set: map[string]int{"change_n": 200, "change_how": 1}},
		{op: opFind, set: map[string]int{"f_model": 1, "f_sort": 5}},
		{op: opAdvance, set: map[string]int{"advance": 6}}, // an hour
		{op: opMatch},
		{op: opAdvance, set: map[string]int{"advance": 7}}, // a day: all expire
		{op: opSnapshot},
		{op: opPut},
		{op: opPut},
		{op: opAdvance, set: map[string]int{"advance": 7}}, // all but two forgotten: the room's stack is compacted
	})
	var seeds [][]byte
	for _, s := range steps {
		seeds = append(seeds, recordRun(t, &recorder{steps: s}, 0))
	}
	// A full book, and bids, through the signed envelopes.
	seeds = append(seeds, recordRun(t, &recorder{init: map[string]int{"offer_cap": 4, "bid_cap": 4}, steps: []scriptStep{
		{op: opBulkPut, set: map[string]int{"bulk_big": 3, "bulk_n_big": 60, "spread": 3}},
		{op: opSigned, set: map[string]int{"issuer": 5, "groups": 5}},
		{op: opSigned, set: map[string]int{"issuer": 4, "flips": 3, "at": 40, "byte": 7}},
		{op: opSignedBid, set: map[string]int{"issuer": 4, "bid_seq": 2}},
		{op: opBid},
		{op: opBid, set: map[string]int{"issuer": 1, "bid_id": 1}},
		{op: opBid, set: map[string]int{"issuer": 3, "bid_id": 2}},
		{op: opBid, set: map[string]int{"issuer": 5, "bid_id": 2}},
		{op: opBid, set: map[string]int{"issuer": 5, "bid_id": 1}},
		{op: opBid, set: map[string]int{"issuer": 2}}, // refused: the book is full of higher ranks
		{op: opAdvance, set: map[string]int{"advance": 7}},
		{op: opAdvance, set: map[string]int{"advance": 7}},
		{op: opMatch},
	}}, 0))
	// Offers of two models (their probes pair), matched and explained
	// by model, memory and neither.
	paired := map[string]int{"groups": 4, "model1": 1}
	seeds = append(seeds, recordRun(t, &recorder{steps: []scriptStep{
		{op: opPut, set: paired},
		{op: opPut, set: map[string]int{"groups": 4, "model1": 1, "issuer": 1, "price": 3}},
		{op: opPut, set: map[string]int{"groups": 4, "model1": 2, "issuer": 2}},
		{op: opPut, set: map[string]int{"model0": 1}},
		{op: opPut, set: map[string]int{"model0": 1, "issuer": 3, "vram": 5}},
		{op: opPut, set: map[string]int{"model0": 2, "issuer": 4}},
		{op: opPut, set: map[string]int{"vram": 7}},              // not a whole GiB
		{op: opPut, set: map[string]int{"model0": 5, "link": 4}}, // a model the catalog lacks
		{op: opPut, set: map[string]int{"count": 8}},             // too many for a probe
		// Sure probes that fail each check Explain reads from them.
		{op: opPut, set: map[string]int{"count": 4, "issuer": 1}},
		{op: opPut, set: map[string]int{"step": 4, "issuer": 2}},
		{op: opPut, set: map[string]int{"tiers": 4, "issuer": 3}},
		{op: opPut, set: map[string]int{"min_h": 4, "issuer": 4}},
		{op: opPut, set: map[string]int{"n_classes": 4, "class": 1, "issuer": 5}},
		{op: opPut, set: map[string]int{"currency": 4, "issuer": 5}},
		{op: opPut, set: map[string]int{"allow": 4, "issuer": 2}},
		{op: opMatch},
		{op: opMatch, set: map[string]int{"bid_count": 7, "min_per_provider": 8}},
		{op: opMatch, set: map[string]int{"bid_count": 1, "min_per_provider": 1}},
		{op: opMatch, set: map[string]int{"match_later": 5}},
		{op: opMatch, set: map[string]int{"bid_tier": 1, "bid_count": 7}},
		{op: opMatch, set: map[string]int{"bid_count": 7, "k": 5}},
		{op: opMatch, set: map[string]int{"bid_tier": 2, "preemption_ok": 4, "max_price": 6}},
		{op: opMatch, set: map[string]int{"hours": 4, "max_price": 7}},
		{op: opMatch, set: map[string]int{"bid_models": 5}},
		{op: opMatch, set: map[string]int{"bid_models": 4, "min_vram": 6}},
		{op: opMatch, set: map[string]int{"bid_models": 7, "k": 0, "bid_count": 7}},
		{op: opMatch, set: map[string]int{"bid_currency": 4, "bid_tier": 2, "preemption_ok": 4}},
	}}, 0))
	// More workload classes than the class table numbers.
	var classes []scriptStep
	for i := range machineClasses {
		classes = append(classes, scriptStep{op: opPut, set: map[string]int{"n_classes": 4, "class": i}})
	}
	seeds = append(seeds, recordRun(t, &recorder{init: map[string]int{"offer_cap": 4, "unranked": 4}, steps: append(classes, scriptStep{op: opMatch})}, 0))
	// Mixed runs.
	for i := range 4 {
		seeds = append(seeds, recordRun(t, &recorder{r: rand.New(rand.NewPCG(uint64(i), 26))}, 40))
	}
	return seeds
}
