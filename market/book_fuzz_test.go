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
		{op: opBulkChange, set: map[string]int{"change_n": 150, "change_from": 300, "change_how": 2}},
		{op: opMatch, set: map[string]int{"k": 3}},
		{op: opBulkPut, set: map[string]int{"bulk_big": 3, "bulk_n_big": 600, "spread": 3}},
		{op: opBulkChange, set: map[string]int{"change_n": 200, "change_how": 1}},
		{op: opFind, set: map[string]int{"f_model": 1, "f_sort": 5}},
		{op: opAdvance, set: map[string]int{"advance": 7}},
		{op: opMatch},
		{op: opAdvance, set: map[string]int{"advance": 8}},
		{op: opSnapshot},
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
		{op: opAdvance, set: map[string]int{"advance": 8}},
		{op: opAdvance, set: map[string]int{"advance": 8}},
		{op: opMatch},
	}}, 0))
	// Mixed runs.
	for i := range 4 {
		seeds = append(seeds, recordRun(t, &recorder{r: rand.New(rand.NewPCG(uint64(i), 26))}, 40))
	}
	return seeds
}
