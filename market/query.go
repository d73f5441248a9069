package market

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/spell"
)

// A renter's query language, as central marketplaces' search has it:
//
//	num_gpus>=2 down_mbps>500 cuda>=12.4 reliability>0.95 country!=US gpu_ram=24..48
//
// Terms are separated by spaces and all must hold; each is FIELD OP
// VALUE, OP one of < <= > >= = == !=, or FIELD=LO..HI (both ends in).
// GPU fields hold when one GPU group the bid accepts has them all; host
// fields read the lease's share of the host, as the host check does.
// A query narrows what the bid's own terms already select, on this
// node's matcher: it travels in no bid.

// MaxQueryLen bounds a query's text, and MaxQueryTerms its terms.
const (
	MaxQueryLen   = 1024
	MaxQueryTerms = 32
)

// Query is a parsed query; the zero Query holds for every offer.
type Query struct {
	terms []queryTerm
	text  string
}

type queryOp uint8

const (
	opLT queryOp = iota
	opLE
	opGT
	opGE
	opEQ
	opNE
	opRange
)

type queryOpText struct {
	text string
	op   queryOp
}

// queryOps are the operators as written, the two-character ones first.
var queryOps = []queryOpText{{"<=", opLE}, {">=", opGE}, {"!=", opNE}, {"==", opEQ}, {"<", opLT}, {">", opGT}, {"=", opEQ}}

type queryTerm struct {
	f      *QueryField
	op     queryOp
	lo, hi float64 // numbers, versions encoded (see QueryField.parse)
	str    string  // a string field's value
	text   string  // as written
}

// fieldKind is how a field's values read and compare.
type fieldKind uint8

const (
	kindNumber  fieldKind = iota
	kindVersion           // "12.4", "550.54.15": compared part by part
	kindString            // compared by = and != only, case aside
	kindBool              // true or false, by = and !=
)

// A QueryField is one field a query may name.
type QueryField struct {
	Name, Unit, Doc string
	kind            fieldKind
	gpu             bool // read per GPU group
	// value reads the field of a group (g, where gpu) of an offer being
	// matched (c); ok false where the offer does not say.
	value func(c *evalCtx, g *pb.GPUGroup) (float64, bool)
	str   func(c *evalCtx) string
}

// pcieGBps is one PCIe lane's rate in GB/s by generation.
var pcieGBps = [...]float64{0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.877, 15.125}

func known(v float64) (float64, bool) { return v, v != 0 }

// QueryFields are the fields, in the order --help lists them.
var QueryFields = []*QueryField{
	{Name: "num_gpus", Unit: "GPUs", Doc: "GPUs of the model the offer has", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return float64(c.supply), true }},
	{Name: "lease_gpus", Unit: "GPUs", Doc: "GPUs a lease takes", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return float64(c.gpus), true }},
	{Name: "gpu_ram", Unit: "GB", Doc: "memory of a GPU, as sold", gpu: true, value: func(c *evalCtx, g *pb.GPUGroup) (float64, bool) {
		return float64(marketedOf(g)) / (1 << 30), true
	}},
	{Name: "compute", Unit: "", Doc: "CUDA compute capability, such as 8.9", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		return float64(g.GetComputeCapability()) / 10, true
	}},
	{Name: "cuda", Doc: "CUDA version the driver supports, such as 12.4", kind: kindVersion, gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		return known(float64(g.GetCudaVersion()/100*1_000_000 + g.GetCudaVersion()%100*1000))
	}},
	{Name: "driver", Doc: "driver version, such as 550.54.15", kind: kindVersion, gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		v, err := parseVersion(g.GetDriverVersion())
		return v, err == nil && v != 0
	}},
	{Name: "pcie_gen", Doc: "PCIe link generation", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) { return known(float64(g.GetPcieGeneration())) }},
	{Name: "pcie_lanes", Doc: "PCIe link width", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) { return known(float64(g.GetPcieLanes())) }},
	{Name: "pcie_bw", Unit: "GB/s", Doc: "PCIe bandwidth, generation times lanes", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		gen := min(int(g.GetPcieGeneration()), len(pcieGBps)-1)
		return known(pcieGBps[gen] * float64(g.GetPcieLanes()))
	}},
	{Name: "mem_bw", Unit: "GB/s", Doc: "GPU memory bandwidth", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		return known(float64(g.GetMemoryBandwidthGbps()))
	}},
	{Name: "tflops", Unit: "TFLOPS", Doc: "peak FP32 throughput of a GPU", gpu: true, value: func(_ *evalCtx, g *pb.GPUGroup) (float64, bool) {
		return known(float64(g.GetFp32Gflops()) / 1000)
	}},
	{Name: "tflops_per_usd", Unit: "TFLOPS per unit of price", Doc: "peak FP32 TFLOPS of a GPU per price per GPU-hour: performance per dollar", gpu: true,
		value: func(c *evalCtx, g *pb.GPUGroup) (float64, bool) {
			if g.GetFp32Gflops() == 0 || c.price == 0 {
				return 0, false
			}
			return float64(g.GetFp32Gflops()) / 1000 / (float64(c.price) / 1e6), true
		}},
	{Name: "cpu_cores", Doc: "CPU cores of the lease's share", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return float64(c.f.host.share(c.gpus).cores), true }},
	{Name: "ram", Unit: "GB", Doc: "RAM of the lease's share", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.f.host.share(c.gpus).ram) / (1 << 30), true
	}},
	{Name: "disk", Unit: "GB", Doc: "disk of the lease's share", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.f.host.share(c.gpus).disk) / (1 << 30), true
	}},
	{Name: "up_mbps", Unit: "Mbit/s", Doc: "uplink of the lease's share", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.f.host.share(c.gpus).up) / 1e6, true
	}},
	{Name: "down_mbps", Unit: "Mbit/s", Doc: "downlink of the lease's share", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.f.host.share(c.gpus).down) / 1e6, true
	}},
	{Name: "price", Unit: "per GPU-hour", Doc: "price per GPU-hour for the bid's tier, in its window", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.price) / 1e6, true
	}},
	{Name: "reliability", Doc: "the provider's reliability, 0 to 1", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return c.rel, true }},
	{Name: "rtt_ms", Unit: "ms", Doc: "round-trip time to the provider, measured or estimated", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return float64(c.rtt) / float64(time.Millisecond), c.rttKnown
	}},
	{Name: "max_hours", Unit: "hours", Doc: "longest lease the offer sells", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return float64(c.f.maxDur) / 3600, true }},
	{Name: "open_ports", Doc: "inbound ports open to a lease", value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) { return float64(c.f.openPorts), true }},
	{Name: "static_ip", Doc: "the host's address is static (true or false)", kind: kindBool, value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return b2f(c.f.static), true
	}},
	{Name: "relay_only", Doc: "the provider is reached through relays (true or false)", kind: kindBool, value: func(c *evalCtx, _ *pb.GPUGroup) (float64, bool) {
		return b2f(c.f.relayOnly), true
	}},
	{Name: "country", Doc: "ISO 3166 country code, by = or !=", kind: kindString, str: func(c *evalCtx) string { return c.f.country }},
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// marketedOf is a group's memory as sold.
func marketedOf(g *pb.GPUGroup) uint64 {
	cat := gpus.Default()
	return cat.MarketedBytes(cat.CanonicalFor(g.GetModel(), g.GetVramBytes()), g.GetVramBytes())
}

func queryField(name string) *QueryField {
	i := slices.IndexFunc(QueryFields, func(f *QueryField) bool { return f.Name == name })
	if i < 0 {
		return nil
	}
	return QueryFields[i]
}

// QueryError is a query that does not parse: where (a byte offset, from
// 1) and why.
type QueryError struct {
	Pos  int
	Text string
	Why  string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("where: at position %d (%q): %s", e.Pos, e.Text, e.Why)
}

// ParseQuery reads a query; "" is the zero Query.
func ParseQuery(s string) (Query, error) {
	if len(s) > MaxQueryLen {
		return Query{}, &QueryError{Pos: MaxQueryLen + 1, Text: clip(s[MaxQueryLen:]), Why: fmt.Sprintf("the query is %d bytes; at most %d", len(s), MaxQueryLen)}
	}
	q := Query{text: strings.Join(strings.Fields(s), " ")}
	for pos := 0; pos < len(s); { // terms as strings.Fields splits them
		r, n := utf8.DecodeRuneInString(s[pos:])
		if unicode.IsSpace(r) {
			pos += n
			continue
		}
		end := pos
		for end < len(s) {
			r, n := utf8.DecodeRuneInString(s[end:])
			if unicode.IsSpace(r) {
				break
			}
			end += n
		}
		if len(q.terms) == MaxQueryTerms {
			return Query{}, &QueryError{Pos: pos + 1, Text: s[pos:end], Why: fmt.Sprintf("more than %d terms", MaxQueryTerms)}
		}
		t, err := parseTerm(s[pos:end])
		if err != nil {
			err.Pos += pos
			return Query{}, err
		}
		q.terms = append(q.terms, t)
		pos = end
	}
	return q, nil
}

// parseTerm reads one term; an error's Pos is within it, from 1.
func parseTerm(s string) (queryTerm, *QueryError) {
	t := queryTerm{text: s}
	i := strings.IndexAny(s, "<>=!")
	if i <= 0 {
		return t, &QueryError{Pos: 1, Text: s, Why: "want FIELD OP VALUE, such as num_gpus>=2, with OP one of < <= > >= = !="}
	}
	name := strings.ToLower(s[:i])
	if t.f = queryField(name); t.f == nil {
		near := nearestField(name)
		why := fmt.Sprintf("unknown field %q; fields: %s", name, strings.Join(QueryFieldNames(), ", "))
		if near != "" {
			why = fmt.Sprintf("unknown field %q; did you mean %q? (fields: %s)", name, near, strings.Join(QueryFieldNames(), ", "))
		}
		return t, &QueryError{Pos: 1, Text: s, Why: why}
	}
	opText := s[i:]
	j := slices.IndexFunc(queryOps, func(o queryOpText) bool { return strings.HasPrefix(opText, o.text) })
	if j < 0 {
		return t, &QueryError{Pos: i + 1, Text: s, Why: "want an operator: < <= > >= = !="}
	}
	t.op, opText = queryOps[j].op, opText[len(queryOps[j].text):]
	vpos := len(s) - len(opText) + 1
	if opText == "" {
		return t, &QueryError{Pos: vpos, Text: s, Why: fmt.Sprintf("no value after %s", s[i:len(s)-len(opText)])}
	}
	if strings.ContainsAny(opText, "<>=!") {
		return t, &QueryError{Pos: vpos, Text: s, Why: fmt.Sprintf("value %q holds an operator", opText)}
	}
	switch t.f.kind {
	case kindString:
		if t.op != opEQ && t.op != opNE {
			return t, &QueryError{Pos: i + 1, Text: s, Why: fmt.Sprintf("%s compares by = or != only", t.f.Name)}
		}
		t.str = strings.ToUpper(opText)
		return t, nil
	case kindBool:
		b, err := strconv.ParseBool(opText)
		if err != nil || t.op != opEQ && t.op != opNE {
			return t, &QueryError{Pos: vpos, Text: s, Why: fmt.Sprintf("%s is true or false, by = or !=", t.f.Name)}
		}
		t.lo = b2f(b)
		return t, nil
	}
	if lo, hi, ok := strings.Cut(opText, ".."); ok {
		if t.op != opEQ {
			return t, &QueryError{Pos: i + 1, Text: s, Why: "a range LO..HI takes ="}
		}
		var err1, err2 error
		t.lo, err1 = t.f.parse(lo)
		t.hi, err2 = t.f.parse(hi)
		if err := cmp.Or(err1, err2); err != nil || t.lo > t.hi {
			return t, &QueryError{Pos: vpos, Text: s, Why: fmt.Sprintf("range %q: want LO..HI with LO at most HI", opText)}
		}
		t.op = opRange
		return t, nil
	}
	v, err := t.f.parse(opText)
	if err != nil {
		return t, &QueryError{Pos: vpos, Text: s, Why: err.Error()}
	}
	t.lo = v
	return t, nil
}

// parse reads a value of f: a number, or a version.
func (f *QueryField) parse(s string) (float64, error) {
	if f.kind == kindVersion {
		return parseVersion(s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %q: want a number", f.Name, s)
	}
	return v, nil
}

// parseVersion reads "12.4" or "550.54.15" as one number that orders
// versions: each of up to three parts below 1000.
func parseVersion(s string) (float64, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 3 {
		return 0, fmt.Errorf("version %q: want up to three parts, such as 12.4 or 550.54.15", s)
	}
	v := 0.0
	for i := range 3 {
		n := uint64(0)
		if i < len(parts) {
			var err error
			if n, err = strconv.ParseUint(parts[i], 10, 16); err != nil || n > 999 {
				return 0, fmt.Errorf("version %q: want numbers below 1000 joined by dots", s)
			}
		}
		v = v*1000 + float64(n)
	}
	return v, nil
}

// QueryFieldNames are the names of QueryFields, in their order.
func QueryFieldNames() []string {
	out := make([]string, len(QueryFields))
	for i, f := range QueryFields {
		out[i] = f.Name
	}
	return out
}

// nearestField is the field a misspelt name most likely meant, or "".
func nearestField(name string) string { return spell.Nearest(name, QueryFieldNames()) }

// String is the query as parsed, its spaces normalised.
func (q Query) String() string { return q.text }

// Empty says whether q holds for every offer.
func (q Query) Empty() bool { return len(q.terms) == 0 }

func (t *queryTerm) holds(c *evalCtx, g *pb.GPUGroup) bool {
	if t.f.kind == kindString {
		eq := strings.EqualFold(t.f.str(c), t.str)
		return eq == (t.op == opEQ)
	}
	v, ok := t.f.value(c, g)
	if !ok {
		return t.op == opNE // an offer that does not say is no match, but for !=
	}
	switch t.op {
	case opLT:
		return v < t.lo
	case opLE:
		return v <= t.lo
	case opGT:
		return v > t.lo
	case opGE:
		return v >= t.lo
	case opEQ:
		return v == t.lo
	case opNE:
		return v != t.lo
	}
	return v >= t.lo && v <= t.hi
}

// fails returns the first term of q the offer in c fails, or nil: its
// offer terms on the offer, its GPU terms on one group of the GPUs a
// lease takes (those the bid accepts, c.masks.compute, of the model
// fitsGPUs chose; of any model where c.model is "") that has them all.
func (q *Query) fails(c *evalCtx) *queryTerm {
	for i := range q.terms {
		if t := &q.terms[i]; !t.f.gpu && !t.holds(c, nil) {
			return t
		}
	}
	if !slices.ContainsFunc(q.terms, func(t queryTerm) bool { return t.f.gpu }) {
		return nil // no GPU term: the offer need not be decoded
	}
	var first *queryTerm
	groups := c.offer().GetGpus()
	for i := range min(len(groups), 64) {
		if c.masks.compute&(1<<i) == 0 || c.model != "" && c.f.gpus[i].model != c.model {
			continue // not the GPUs a lease takes
		}
		var failed *queryTerm
		for j := range q.terms {
			if t := &q.terms[j]; t.f.gpu && !t.holds(c, groups[i]) {
				failed = t
				break
			}
		}
		if failed == nil {
			return nil
		}
		first = cmp.Or(first, failed)
	}
	return first
}

// listed says whether the offer of e holds to q as a listing shows it,
// with no bid to fix a lease: its GPU terms on one group of those in
// mask, its other terms on the offer whole: num_gpus counts the GPUs in
// mask, lease_gpus all its GPUs, the host terms read the whole host, the
// price is the one it is listed at; reliability and RTT as the sources
// give them.
func (q *Query) listed(e *offerEntry, mask uint64, price uint64, rel Reliability, rtts RTTs) bool {
	c := evalCtx{e: e, f: &e.offerFacts, issuer: e.key.issuer, masks: gpuMasks{compute: mask}, price: price}
	for i := range min(len(e.gpus), 64) {
		if mask&(1<<i) != 0 {
			c.supply += e.gpus[i].count
		}
	}
	c.gpus = e.host.gpus // a lease of every GPU: the whole host
	rel, rtts = sourcesOr(rel, rtts)
	c.rel = clamp01(rel.Reliability(c.issuer))
	c.rtt, c.rttFrom = rttOf(rtts, c.issuer, e.coord)
	c.rttKnown = c.rttFrom != RTTUnknown
	return q.fails(&c) == nil
}

func kindWhere(p *bidPlan) string { return "not where " + p.query.String() }

func fitsWhere(c *evalCtx) bool {
	if c.p.query.Empty() {
		return true
	}
	if t := c.p.query.fails(c); t != nil {
		return c.explain && c.failf("%s: %s", t.text, c.describe(t))
	}
	return true
}

// describe says what the offer in c has of t's field.
func (c *evalCtx) describe(t *queryTerm) string {
	if t.f.kind == kindString {
		return fmt.Sprintf("%s is %s", t.f.Name, t.f.str(c))
	}
	var g *pb.GPUGroup
	if gs := c.offer().GetGpus(); t.f.gpu {
		for i := range min(len(gs), len(c.f.gpus)) {
			if c.f.gpus[i].model == c.model {
				g = gs[i]
				break
			}
		}
		if g == nil {
			return "no GPU of the model a lease takes"
		}
	}
	v, ok := t.f.value(c, g)
	if !ok {
		return fmt.Sprintf("the offer does not say its %s", t.f.Name)
	}
	return fmt.Sprintf("%s is %s", t.f.Name, strconv.FormatFloat(v, 'g', 6, 64))
}

// SortCandidates orders candidates by a query field, rising, or falling
// where desc; candidates that do not say it go last; ties keep their
// order. It is for a listing after the ranking: the field is read as
// the where check reads it, of the GPUs of the candidate's model (the
// best of its groups), its supply and its figures.
func SortCandidates(cs []Candidate, field string, desc bool) error {
	f, err := sortField(field)
	if err != nil {
		return err
	}
	type keyed struct {
		v  float64
		ok bool
	}
	keys := make([]keyed, len(cs))
	for i := range cs {
		c := candidateCtx(&cs[i])
		best, ok := math.Inf(1), false
		if desc {
			best = math.Inf(-1)
		}
		if f.gpu {
			for j, g := range c.o.GetGpus() {
				if j >= len(c.f.gpus) || c.f.gpus[j].model != cs[i].Model {
					continue // not the GPUs a lease takes
				}
				if v, known := f.value(c, g); known {
					if desc {
						best = max(best, v)
					} else {
						best = min(best, v)
					}
					ok = true
				}
			}
		} else {
			best, ok = f.value(c, nil)
		}
		keys[i] = keyed{best, ok}
	}
	idx := make([]int, len(cs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ka, kb := keys[a], keys[b]
		if ka.ok != kb.ok {
			if ka.ok {
				return -1
			}
			return 1
		}
		if desc {
			return cmp.Compare(kb.v, ka.v)
		}
		return cmp.Compare(ka.v, kb.v)
	})
	out := make([]Candidate, len(cs))
	for i, j := range idx {
		out[i] = cs[j]
	}
	copy(cs, out)
	return nil
}

// CheckSortField says whether SortCandidates sorts by field.
func CheckSortField(field string) error {
	_, err := sortField(field)
	return err
}

func sortField(field string) (*QueryField, error) {
	f := queryField(strings.ToLower(field))
	if f == nil || f.kind == kindString {
		return nil, fmt.Errorf("sort %q: want one of %s", field, strings.Join(sortableFields(), ", "))
	}
	return f, nil
}

func sortableFields() []string {
	var out []string
	for _, f := range QueryFields {
		if f.kind != kindString {
			out = append(out, f.Name)
		}
	}
	return out
}

// candidateCtx is what a query field reads of a candidate: its figures,
// and its supply, the GPUs of its model the offer has.
func candidateCtx(c *Candidate) *evalCtx {
	o := c.Offer()
	var f offerFacts
	if c.entry != nil {
		f = c.entry.offerFacts // the book's, made when it took the offer
	} else {
		f = factsOf(o)
	}
	ctx := &evalCtx{o: o, f: &f, gpus: c.GPUs, model: c.Model, price: c.PriceMicros, rel: c.Reliability, rtt: c.RTT, rttKnown: c.RTTKnown}
	for _, g := range f.gpus {
		if g.model == c.Model {
			ctx.supply += g.count
		}
	}
	return ctx
}
