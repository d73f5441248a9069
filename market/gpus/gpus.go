// Package gpus is the GPU catalog: canonical model IDs with their
// family, architecture, marketed memory, form factor, interconnect and
// compute capability, and the names a GPU goes by (NVML's device names,
// PCI device IDs, the spellings renters write). Offers name GPUs by
// canonical ID; a bid names a model or a family in any common spelling.
// The table is gpus.tsv (see README.md for its sources and licences).
//
// gpus is pure: it imports nothing of idlegrid.
package gpus

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

//go:embed gpus.tsv
var gpusTSV []byte

// Model is one row of the catalog.
type Model struct {
	ID           string // canonical: "H100 SXM", "RTX 4090"
	Family       string // what "any of" names: "H100"
	Architecture string // "Hopper"
	MemoryGB     uint32 // marketed: 24 for a card NVML reports as 23.99 GiB
	MemoryType   string // "HBM3"
	FormFactor   string // one of FormFactors
	NVLink       string // "yes" (SXM, NVL), "bridge" (with a bridge fitted) or "no"
	// ComputeCapability times ten: 90 for 9.0.
	ComputeCapability uint32
	Segment           string // "datacenter", "workstation" or "consumer"
	PCIIDs            []uint16
	NVMLNames         []string
	Aliases           []string
}

// MemoryBytes is the marketed memory in bytes (GB read as GiB, as the
// industry sells GPU memory).
func (m *Model) MemoryBytes() uint64 { return uint64(m.MemoryGB) << 30 }

// FormFactors are the form factors a bid may ask for.
var FormFactors = []string{"SXM", "PCIe", "NVL", "Superchip"}

// FormFactorOf reads a form factor in any case ("sxm" is "SXM"); false
// when it is none of FormFactors.
func FormFactorOf(s string) (string, bool) {
	i := slices.IndexFunc(FormFactors, func(f string) bool { return strings.EqualFold(f, s) })
	if i < 0 {
		return "", false
	}
	return FormFactors[i], true
}

// Catalog is a parsed table.
type Catalog struct {
	models   []*Model
	byKey    map[string]*Model   // Key of ID, aliases and NVML names
	families map[string][]*Model // Key of the family
	byPCI    map[uint16][]*Model // a device ID some boards share names several
}

var (
	defaultOnce sync.Once
	defaultCat  *Catalog
)

// Default is the catalog shipped in gpus.tsv.
func Default() *Catalog {
	defaultOnce.Do(func() {
		c, err := Parse(gpusTSV)
		if err != nil {
			panic("gpus: the shipped table: " + err.Error())
		}
		defaultCat = c
	})
	return defaultCat
}

var columns = []string{"id", "family", "architecture", "memory_gb", "memory_type", "form_factor", "nvlink", "compute_capability", "segment", "pci_ids", "nvml_names", "aliases"}

// Parse reads a table: a header row of the columns above, then one
// model a row, tab-separated; lines starting with # are comments. A
// name (ID, alias, NVML name) that two models share is an error.
func Parse(tsv []byte) (*Catalog, error) {
	c := &Catalog{byKey: map[string]*Model{}, families: map[string][]*Model{}, byPCI: map[uint16][]*Model{}}
	sc := bufio.NewScanner(bytes.NewReader(tsv))
	line, header := 0, false
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Split(text, "\t")
		if !header {
			if !slices.Equal(f, columns) {
				return nil, fmt.Errorf("line %d: header %q; want %q", line, f, columns)
			}
			header = true
			continue
		}
		if len(f) != len(columns) {
			return nil, fmt.Errorf("line %d: %d fields; want %d", line, len(f), len(columns))
		}
		m, err := parseRow(f)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if err := c.add(m); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c.models) == 0 {
		return nil, fmt.Errorf("no models")
	}
	return c, nil
}

func parseRow(f []string) (*Model, error) {
	m := &Model{ID: f[0], Family: f[1], Architecture: f[2], MemoryType: f[4], FormFactor: f[5], NVLink: f[6], Segment: f[8]}
	if m.ID == "" || m.Family == "" {
		return nil, fmt.Errorf("id %q, family %q: want both", m.ID, m.Family)
	}
	gb, err := strconv.ParseUint(f[3], 10, 16)
	if err != nil || gb == 0 {
		return nil, fmt.Errorf("%s: memory_gb %q: want a whole number of GB", m.ID, f[3])
	}
	m.MemoryGB = uint32(gb)
	if !slices.Contains(FormFactors, m.FormFactor) {
		return nil, fmt.Errorf("%s: form_factor %q: want one of %s", m.ID, m.FormFactor, strings.Join(FormFactors, ", "))
	}
	if !slices.Contains([]string{"yes", "bridge", "no"}, m.NVLink) {
		return nil, fmt.Errorf("%s: nvlink %q: want yes, bridge or no", m.ID, m.NVLink)
	}
	major, minor, ok := strings.Cut(f[7], ".")
	ma, err1 := strconv.ParseUint(major, 10, 8)
	mi, err2 := strconv.ParseUint(minor, 10, 8)
	if !ok || err1 != nil || err2 != nil || mi > 9 {
		return nil, fmt.Errorf("%s: compute_capability %q: want major.minor", m.ID, f[7])
	}
	m.ComputeCapability = uint32(ma*10 + mi)
	for _, s := range split(f[9], ",") {
		id, err := strconv.ParseUint(s, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("%s: pci_ids %q: want 4 hex digits", m.ID, s)
		}
		m.PCIIDs = append(m.PCIIDs, uint16(id))
	}
	m.NVMLNames, m.Aliases = split(f[10], "|"), split(f[11], "|")
	return m, nil
}

func split(s, sep string) []string {
	var out []string
	for _, x := range strings.Split(s, sep) {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func (c *Catalog) add(m *Model) error {
	for _, name := range slices.Concat([]string{m.ID}, m.NVMLNames, m.Aliases) {
		k := Key(name)
		if k == "" {
			return fmt.Errorf("%s: the name %q has no letters or digits", m.ID, name)
		}
		if o, ok := c.byKey[k]; ok && o != m {
			return fmt.Errorf("%s: the name %q is also %s's", m.ID, name, o.ID)
		}
		c.byKey[k] = m
	}
	for _, id := range m.PCIIDs {
		c.byPCI[id] = append(c.byPCI[id], m)
	}
	fk := Key(m.Family)
	c.families[fk] = append(c.families[fk], m)
	c.models = append(c.models, m)
	return nil
}

// Key is how names compare: lower case, letters and digits only, with
// a leading vendor or brand word ("NVIDIA", "GeForce", "Tesla", and a
// go-nvml mock's "Mock") left out: "NVIDIA GeForce RTX 4090", "rtx-4090"
// and "RTX4090" are all "rtx4090".
func Key(name string) string {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for len(words) > 1 && slices.Contains([]string{"mock", "nvidia", "geforce", "tesla"}, words[0]) {
		words = words[1:]
	}
	return strings.Join(words, "")
}

// Models lists the catalog's models in table order.
func (c *Catalog) Models() []*Model { return slices.Clone(c.models) }

// Lookup finds the model a name names: its ID, an alias or an NVML
// device name, in any spelling Key equates.
func (c *Catalog) Lookup(name string) (*Model, bool) {
	m, ok := c.byKey[Key(name)]
	return m, ok
}

// Family returns the models of the family a name names ("h100": every
// H100), in table order.
func (c *Catalog) Family(name string) ([]*Model, bool) {
	ms, ok := c.families[Key(name)]
	return ms, ok
}

// FromNVML finds the model of a GPU from its NVML device name, or, for
// a name the catalog lacks, its PCI device ID (NVML's pciDeviceId: the
// device in the high 16 bits, the vendor 0x10de in the low; 0 if
// unknown) where only one model has that ID (boards of one chip may
// share it: the A2 and the A16).
func (c *Catalog) FromNVML(name string, pciDeviceID uint32) (*Model, bool) {
	if m, ok := c.Lookup(name); ok {
		return m, true
	}
	if pciDeviceID&0xffff == 0x10de {
		if ms := c.byPCI[uint16(pciDeviceID>>16)]; len(ms) == 1 {
			return ms[0], true
		}
	}
	return nil, false
}

// ModelName is what an offer calls a GPU with this NVML name and PCI
// device ID: the catalog's ID, or, for a GPU it lacks, the name without
// its vendor word ("NVIDIA Foo 9" is "Foo 9").
func (c *Catalog) ModelName(nvmlName string, pciDeviceID uint32) string {
	if m, ok := c.FromNVML(nvmlName, pciDeviceID); ok {
		return m.ID
	}
	name := strings.TrimSpace(nvmlName)
	for _, p := range []string{"Mock ", "NVIDIA "} {
		name = strings.TrimSpace(strings.TrimPrefix(name, p))
	}
	return name
}

// Canonical is the ID of the model a name names, or the name, trimmed,
// when the catalog lacks it (a hand-listed GPU).
func (c *Catalog) Canonical(name string) string {
	if m, ok := c.Lookup(name); ok {
		return m.ID
	}
	return strings.TrimSpace(name)
}

// Covers says whether an offer's name for a GPU group is true of a GPU
// of model (a catalog ID, or a name it lacks): the same model in any
// spelling, or its family ("H100" is true of an H100 SXM).
func (c *Catalog) Covers(claim, model string) bool {
	if c.Canonical(claim) == c.Canonical(model) {
		return true
	}
	m, ok := c.Lookup(model)
	return ok && Key(claim) == Key(m.Family)
}

// Want is what a bid's model entry accepts: one model, or every model
// of a family.
type Want struct {
	Family string   // set when the entry named a family
	Models []string // canonical IDs
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

// Resolve reads a renter's spelling of a model or family: a family's
// name means every model of it ("H100"; "RTX 4000 Ada", the small-form
// board too), any other name its one model ("H100 SXM", "4090"). A
// spelling the catalog lacks is an *UnknownModelError with the nearest
// names.
func (c *Catalog) Resolve(name string) (Want, error) {
	if ms, ok := c.Family(name); ok {
		w := Want{Family: ms[0].Family}
		for _, m := range ms {
			w.Models = append(w.Models, m.ID)
		}
		return w, nil
	}
	if m, ok := c.Lookup(name); ok {
		return Want{Models: []string{m.ID}}, nil
	}
	return Want{}, &UnknownModelError{Name: name, Suggest: c.nearest(name, 3)}
}

// Expand turns a bid's model entries into the names of offers' GPU
// groups they accept: a model into its ID; a family into its models'
// IDs and the family's own name (a hand-listed group may name only the
// family); a name the catalog lacks into itself. No name repeats.
func (c *Catalog) Expand(entries []string) []string {
	var out []string
	for _, e := range entries {
		w, err := c.Resolve(e)
		switch {
		case err != nil:
			w.Models = []string{strings.TrimSpace(e)}
		case w.Family != "" && !slices.Contains(w.Models, w.Family):
			w.Models = append(w.Models, w.Family)
		}
		for _, id := range w.Models {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// nearest returns up to n model IDs and families whose keys are closest
// to name's, by edit distance, and close enough to be a likely typo or
// a likely longer name (a key that contains name's).
func (c *Catalog) nearest(name string, n int) []string {
	k := Key(name)
	if k == "" {
		return nil
	}
	type cand struct {
		name string
		d    int
	}
	best := map[string]int{} // display name → least distance of its keys
	consider := func(key, display string) {
		d := editDistance(k, key)
		if strings.Contains(key, k) && len(k) >= 3 {
			d = min(d, 1)
		}
		if old, ok := best[display]; d <= max(1, len(k)/3) && (!ok || d < old) {
			best[display] = d
		}
	}
	for key, m := range c.byKey {
		consider(key, m.ID)
	}
	for key, ms := range c.families {
		consider(key, ms[0].Family)
	}
	var cands []cand
	for name, d := range best {
		cands = append(cands, cand{name, d})
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(a.d-b.d, cmp.Compare(a.name, b.name)) })
	var out []string
	for _, x := range cands[:min(n, len(cands))] {
		out = append(out, x.name)
	}
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// MarketedBytes is the memory a GPU of model, reporting reported bytes,
// is sold as. A catalog model's marketed size stands for a report within
// a tenth below it (drivers reserve some: a 24 GB card reports 23.99 GiB);
// any other report is rounded up to a whole GiB when within 2% of it.
// Neither ever raises a report by more than a tenth, so a GPU cannot
// claim much more than it has.
func (c *Catalog) MarketedBytes(model string, reported uint64) uint64 {
	if m, ok := c.Lookup(model); ok {
		if mb := m.MemoryBytes(); reported < mb && reported >= mb-mb/10 {
			return mb
		}
	}
	up := (reported + 1<<30 - 1) &^ (1<<30 - 1)
	if up-reported <= up/50 {
		return up
	}
	return reported
}

// ShowMemory writes memory as a person reads it on a spec sheet: whole
// GB ("24 GB"), or one decimal when not whole.
func ShowMemory(b uint64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GB", b>>30)
	}
	return fmt.Sprintf("%.1f GB", float64(b)/(1<<30))
}
