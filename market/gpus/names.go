package gpus

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/idlegrid/idlegrid/market/spell"
)

// How names resolve. A name is read three ways, the first that names
// something winning:
//
//  1. exactly (Key): a family's name, a model's ID, NVML name or alias;
//     an alias naming a memory size its model ships in ("RTX 3060 8GB")
//     constrains memory to it, an ID or NVML name does not;
//  2. an alias several rows of one family give ("GH200 SXM"): a group;
//  3. loosely (loose): the way marketplaces abbreviate, "Q RTX 8000"
//     for Quadro RTX 8000, "4070S Ti" for RTX 4070 Ti SUPER, "A100
//     PCIE" for both A100 PCIe boards, "RTX PRO 6000" for the family,
//     with a memory size ("RTX 4090 48GB") taken out of the name and
//     made a constraint: only GPUs of that marketed memory match.
//
// Offers' names resolve the same way, their memory telling apart the
// models a loose name may mean (CanonicalFor).

// Want is what a bid's model entry accepts.
type Want struct {
	// Name is the entry a bid carries: a model's ID or a family's name,
	// with " <N>GB" where memory is constrained, or, for a group, the
	// spelling. It resolves to this Want again.
	Name   string
	Family string   // set when the entry named a family
	Models []string // canonical IDs
	// MemoryGB constrains the GPUs' marketed memory to exactly this
	// many GB; 0 for any.
	MemoryGB uint32
}

// Accept is one name an offer's GPU group may carry for an entry to
// accept it, and the marketed memory it must then have (0: any). For a
// name the catalog lacks, Kind is its Key: a group of that kind in any
// spelling ("Foo-9" for "Foo 9") is accepted.
type Accept struct {
	Model       string
	MemoryBytes uint64
	Kind        string
}

// KindOf is what Accept.Kind compares a group's canonical name by: its
// Key for a name the catalog lacks (neither a model nor a family), ""
// for one it knows.
func (c *Catalog) KindOf(canonical string) string {
	k := Key(canonical)
	_, model := c.byKey[k]
	_, family := c.families[k]
	if model || family {
		return ""
	}
	return k
}

// Accepts says whether as accept a group of model, of kind (KindOf),
// whose marketed memory is vram: none accept all.
func Accepts(as []Accept, model, kind string, vram uint64) bool {
	return len(as) == 0 || slices.ContainsFunc(as, func(a Accept) bool {
		return (a.Model == model || a.Kind != "" && a.Kind == kind) && (a.MemoryBytes == 0 || a.MemoryBytes == vram)
	})
}

// Lookup finds the model a name names exactly: its ID, an alias or an
// NVML device name, in any spelling Key equates.
func (c *Catalog) Lookup(name string) (*Model, bool) {
	m, ok := c.byKey[Key(name)]
	return m, ok
}

// Family returns the models of the family a name names ("h100": every
// H100; "RTX PRO 6000": every RTX PRO 6000 Blackwell), in table order.
func (c *Catalog) Family(name string) ([]*Model, bool) {
	if ms, ok := c.families[Key(name)]; ok {
		return ms, true
	}
	if ms, ok := c.looseFamilies[loose(name).key]; ok {
		return ms, true
	}
	return nil, false
}

// Resolve reads a renter's spelling of a model, a group or a family. A
// spelling the catalog lacks is an *UnknownModelError with the nearest
// names.
func (c *Catalog) Resolve(name string) (Want, error) {
	if w, ok := c.resolve(name); ok {
		w.Name = c.nameOf(name, w)
		return w, nil
	}
	return Want{}, &UnknownModelError{Name: name, Suggest: c.nearest(name, 3)}
}

func (c *Catalog) resolve(name string) (Want, bool) {
	k := Key(name)
	if k == "" {
		return Want{}, false
	}
	if ms, ok := c.families[k]; ok {
		return familyWant(ms, 0), true
	}
	if m, ok := c.byKey[k]; ok {
		return modelsWant([]*Model{m}, c.aliasMem[k]), true
	}
	if ms, ok := c.shared[k]; ok {
		return modelsWant(ms, 0), true
	}
	l := loose(name)
	if ms, ok := c.looseFamilies[l.key]; ok {
		return familyWant(ms, l.memGB), true
	}
	if ms, ok := c.loose[l.key]; ok {
		return modelsWant(ms, l.memGB), true
	}
	return Want{}, false
}

// familyWant is the want of a family's models; a family of one model is
// that model.
func familyWant(ms []*Model, memGB uint32) Want {
	w := modelsWant(ms, memGB)
	if len(ms) > 1 {
		w.Family = ms[0].Family
	}
	return w
}

// modelsWant is the want of models ms of memory memGB (0: any).
func modelsWant(ms []*Model, memGB uint32) Want {
	w := Want{MemoryGB: memGB}
	for _, m := range ms {
		w.Models = append(w.Models, m.ID)
	}
	return w
}

// nameOf is the entry a bid carries for w, which spelling resolved to:
// the family's name, or the first of the model's ID, NVML names and
// aliases that resolves to it again (an ID may be its family's name),
// each with w's memory; a group's spelling as typed.
func (c *Catalog) nameOf(spelling string, w Want) string {
	var cands []string
	switch m := c.byKey[Key(w.Models[0])]; {
	case w.Family != "":
		cands = []string{w.Family}
	case len(w.Models) == 1:
		cands = slices.Concat([]string{m.ID}, m.NVMLNames, m.Aliases)
	}
	cands = append(cands, strings.Join(strings.Fields(spelling), " "))
	for _, name := range cands {
		for _, n := range []string{name, name + memSuffix(w.MemoryGB)} {
			if again, ok := c.resolve(n); ok && again.Family == w.Family && slices.Equal(again.Models, w.Models) && again.MemoryGB == w.MemoryGB {
				return n
			}
		}
	}
	return cands[len(cands)-1]
}

func memSuffix(gb uint32) string {
	if gb == 0 {
		return ""
	}
	return " " + strconv.Itoa(int(gb)) + "GB"
}

// Expand turns a bid's model entries into what offers' GPU groups they
// accept: a model's ID; a family's models and the family's own name (a
// group an offer names only by family); a name the catalog lacks
// itself; each with the entry's memory. No accept repeats.
func (c *Catalog) Expand(entries []string) []Accept {
	var out []Accept
	add := func(a Accept) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, e := range entries {
		w, ok := c.resolve(e)
		if !ok {
			name := strings.Join(strings.Fields(e), " ")
			add(Accept{Model: name, Kind: Key(name)})
			continue
		}
		mem := uint64(w.MemoryGB) << 30
		for _, id := range w.Models {
			add(Accept{Model: id, MemoryBytes: mem})
		}
		if w.Family != "" {
			add(Accept{Model: w.Family, MemoryBytes: mem})
		}
	}
	return out
}

// Canonical is what an offer's group named name is called: see
// CanonicalFor, without the memory that could tell models apart.
func (c *Catalog) Canonical(name string) string { return c.CanonicalFor(name, 0) }

// CanonicalFor is what an offer's group named name, of GPUs reporting
// vram bytes (0: unknown), is called in the book: the model's ID where
// the name is one of its names (an NVML name names its model, not the
// family Resolve reads in it), or where the name, with the memory,
// names one model; else the family's name where
// its models are all of one family ("Tesla V100", "A100" of 40 GB);
// else the name, trimmed, for a GPU the catalog lacks.
func (c *Catalog) CanonicalFor(name string, vram uint64) string {
	if m, ok := c.byKey[Key(name)]; ok { // a device's name
		return m.ID
	}
	w, ok := c.resolve(name)
	if !ok {
		return strings.Join(strings.Fields(name), " ")
	}
	if len(w.Models) == 1 {
		return w.Models[0]
	}
	if vram != 0 {
		marketed := c.MarketedBytes(name, vram)
		var fit []string
		for _, id := range w.Models {
			if m := c.byKey[Key(id)]; m.MemoryBytes() == marketed {
				fit = append(fit, id)
			}
		}
		if len(fit) == 1 {
			return fit[0]
		}
	}
	first := c.byKey[Key(w.Models[0])].Family
	for _, id := range w.Models {
		if c.byKey[Key(id)].Family != first {
			return strings.Join(strings.Fields(name), " ")
		}
	}
	return first
}

// Covers says whether an offer's name for a GPU group is true of a GPU
// of model (a catalog ID, or a name it lacks): the same model in any
// spelling, or its family ("H100" is true of an H100 SXM).
func (c *Catalog) Covers(claim, model string) bool {
	if c.Canonical(claim) == c.Canonical(model) {
		return true
	}
	m, ok := c.Lookup(model)
	return ok && Key(c.Canonical(claim)) == Key(m.Family)
}

// UnknownModelError is a model or family the catalog lacks; Suggest is
// its nearest names, for "did you mean".
type UnknownModelError struct {
	Name    string
	Suggest []string
}

func (e *UnknownModelError) Error() string {
	s := fmt.Sprintf("GPU model %q: not in the catalog", e.Name)
	if len(e.Suggest) > 0 {
		s += "; did you mean " + quoteOr(e.Suggest) + "?"
	}
	return s + " (idlegrid gpus --catalog lists every model)"
}

func quoteOr(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// looseName is a name as loose reads it: its key, and the memory size
// it names (0: none).
type looseName struct {
	key   string
	memGB uint32
}

// loose reads a name the way marketplaces abbreviate: lower case, in
// words of letters and digits; a leading vendor word dropped (Key's);
// a memory size ("48GB", "48 GB", "144G") taken out; "Q RTX" read as
// "Quadro RTX"; "4070S" and "2060 S" as SUPER, which goes last ("4070S
// Ti" is the 4070 Ti SUPER); "Generation" and "Edition" dropped, and
// "Blackwell" in an RTX PRO name (every RTX PRO is one).
func loose(name string) looseName {
	ws := words(name)
	var l looseName
	out := make([]string, 0, len(ws))
	super := false
	pro := slices.Contains(ws, "pro")
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		if gb, ok := memWord(w); ok {
			l.memGB = gb
			continue
		}
		if n, err := strconv.ParseUint(w, 10, 32); err == nil && i+1 < len(ws) && slices.Contains([]string{"gb", "g", "gib"}, ws[i+1]) {
			l.memGB = uint32(n)
			i++
			continue
		}
		switch {
		case w == "q" && i+1 < len(ws) && ws[i+1] == "rtx":
			w = "quadro"
		case w == "super", w == "s" && !pro && i > 0 && isDigits(ws[i-1]):
			super = true
			continue
		case len(w) >= 4 && w[len(w)-1] == 's' && isDigits(w[:len(w)-1]):
			w, super = w[:len(w)-1], true
		case w == "generation" || w == "edition" || pro && w == "blackwell":
			continue
		}
		out = append(out, w)
	}
	if super {
		out = append(out, "super")
	}
	l.key = strings.Join(out, "")
	return l
}

// words are name's words as Key reads them (lower case, letters and
// digits, a leading vendor word dropped), before it joins them.
func words(name string) []string {
	ws := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for len(ws) > 1 && slices.Contains([]string{"mock", "nvidia", "geforce", "tesla"}, ws[0]) {
		ws = ws[1:]
	}
	return ws
}

// memWord reads a word such as "48gb" or "144g" as a size in GB.
func memWord(w string) (uint32, bool) {
	num := strings.TrimRight(w, "gib")
	if num == w || num == "" || !isDigits(num) || !slices.Contains([]string{"gb", "g", "gib"}, w[len(num):]) {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 32)
	return uint32(n), err == nil && n > 0
}

func isDigits(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// indexLoose builds the loose indexes, the memory aliases name and the
// sizes the catalog knows, once the table is read.
func (c *Catalog) indexLoose() {
	c.loose, c.looseFamilies, c.aliasMem = map[string][]*Model{}, map[string][]*Model{}, map[string]uint32{}
	sizes := map[uint32]bool{}
	for _, m := range c.models {
		sizes[m.MemoryGB] = true
		for _, name := range slices.Concat([]string{m.ID}, m.NVMLNames, m.Aliases) {
			if k := loose(name).key; !slices.Contains(c.loose[k], m) {
				c.loose[k] = append(c.loose[k], m)
			}
		}
		// An alias's size constrains where the model ships in several
		// (half to twice the marketed size: a larger one counts a board's
		// or a superchip's total, "A16 64GB", "GH200 480GB").
		own := map[string]uint32{}
		several := false
		for _, a := range m.Aliases {
			gb := loose(a).memGB
			if k := Key(a); gb != 0 && gb*2 >= m.MemoryGB && gb <= 2*m.MemoryGB && c.byKey[k] == m &&
				!slices.ContainsFunc(m.NVMLNames, func(n string) bool { return Key(n) == k }) {
				own[k] = gb
				several = several || gb != m.MemoryGB
			}
		}
		for k, gb := range own {
			if several {
				c.aliasMem[k] = gb
				sizes[gb] = true
			}
		}
	}
	for _, ms := range c.families {
		c.looseFamilies[loose(ms[0].Family).key] = ms
	}
	for s := range sizes {
		c.sizes = append(c.sizes, s)
	}
	slices.Sort(c.sizes)
}

// nearest returns up to n model IDs and families whose names are
// closest to name's, by edit distance between loose keys (memory left
// out), the longer shared beginning first on a tie, so that suggestions
// stay within the series a renter typed; only those close enough to be
// a likely typo or a likely longer name (one that contains name's).
func (c *Catalog) nearest(name string, n int) []string {
	k := loose(name).key
	if k == "" {
		return nil
	}
	type cand struct {
		name         string
		d, shared, i int
	}
	best := map[string]cand{} // display name → its closest key
	consider := func(key, display string, order int) {
		d, shared := spell.Distance(k, key), commonPrefix(k, key)
		if strings.Contains(key, k) && len(k) >= 3 { // a longer name
			d, shared = min(d, 1), len(k)
		}
		c := cand{display, d, shared, order}
		if old, ok := best[display]; d <= max(1, len(k)/3) && (!ok || d < old.d || d == old.d && c.shared > old.shared) {
			best[display] = c
		}
	}
	for i, m := range c.models {
		for _, nm := range slices.Concat([]string{m.ID}, m.Aliases) {
			consider(loose(nm).key, m.ID, i)
		}
		consider(loose(m.Family).key, m.Family, i)
	}
	var cands []cand
	for _, x := range best {
		cands = append(cands, x)
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(a.d-b.d, b.shared-a.shared, a.i-b.i, cmp.Compare(a.name, b.name))
	})
	var out []string
	for _, x := range cands[:min(n, len(cands))] {
		out = append(out, x.name)
	}
	return out
}

func commonPrefix(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// MarketedBytes is the memory a GPU named model, reporting reported
// bytes, is sold as. One rule for every name, in the catalog or not:
// the smallest marketed size at or above the reading and less than a
// fourteenth above it (drivers reserve a little, and ECC on GDDR takes
// a sixteenth: a 24 GB card reads 23.99 GiB, or 22.49 with ECC; a 48 GB
// one 44.99), the sizes the named model ships in tried before every
// size the catalog knows; else the reading rounded up to a whole GiB
// where that is within 2%; else the reading. A reading of 22 GiB stays
// 22 GB. It never raises a reading by a fourteenth of the size it is
// sold as (a thirteenth of the reading), so a GPU cannot claim much more
// than it has.
func (c *Catalog) MarketedBytes(model string, reported uint64) uint64 {
	if w, ok := c.resolve(model); ok {
		var own []uint32
		for _, id := range w.Models {
			m := c.byKey[Key(id)]
			own = append(own, m.MemoryGB)
			for _, a := range m.Aliases {
				if gb := c.aliasMem[Key(a)]; gb != 0 {
					own = append(own, gb)
				}
			}
		}
		if w.MemoryGB != 0 {
			own = append(own, w.MemoryGB)
		}
		slices.Sort(own)
		if s, ok := sizeAbove(own, reported); ok {
			return s
		}
	}
	if s, ok := sizeAbove(c.sizes, reported); ok {
		return s
	}
	up := (reported + 1<<30 - 1) &^ (1<<30 - 1)
	if up-reported <= up/50 {
		return up
	}
	return reported
}

// sizeAbove is the smallest of sizes (GB, rising) at or above reported
// bytes, and whether the reading is less than a fourteenth below it.
func sizeAbove(sizes []uint32, reported uint64) (uint64, bool) {
	for _, gb := range sizes {
		s := uint64(gb) << 30
		if s >= reported {
			return s, reported > s-s/14
		}
	}
	return 0, false
}
