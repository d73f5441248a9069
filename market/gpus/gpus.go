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
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// aliasMem is the memory an alias names, where it names one a GPU
	// of its model may have ("RTX 3060 8GB"), in GB.
	aliasMem map[string]uint32
	// loose maps a name's loose key (see loose) to the models it may
	// name, and looseFamilies to the models of the family it names.
	loose         map[string][]*Model
	looseFamilies map[string][]*Model
	// shared are the keys of aliases several rows give (a group:
	// "GH200 SXM").
	shared map[string][]*Model
	// sizes are every marketed size the catalog names, in GB, rising.
	sizes []uint32
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
	c := &Catalog{byKey: map[string]*Model{}, families: map[string][]*Model{}, byPCI: map[uint16][]*Model{}, shared: map[string][]*Model{}}
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
	c.indexLoose()
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
	names := slices.Concat([]string{m.ID}, m.NVMLNames)
	for i, name := range slices.Concat(names, m.Aliases) {
		k := Key(name)
		if k == "" {
			return fmt.Errorf("%s: the name %q has no letters or digits", m.ID, name)
		}
		alias := i >= len(names)
		if alias && c.shared[k] != nil {
			c.shared[k] = append(c.shared[k], m)
			continue
		}
		if o, ok := c.byKey[k]; ok && o != m {
			// An alias two rows of one family give names both: a group.
			if !alias || !slices.Contains(o.Aliases, name) || Key(o.Family) != Key(m.Family) {
				return fmt.Errorf("%s: the name %q is also %s's", m.ID, name, o.ID)
			}
			delete(c.byKey, k)
			c.shared[k] = []*Model{o, m}
			continue
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
func Key(name string) string { return strings.Join(words(name), "") }

// Models lists the catalog's models in table order.
func (c *Catalog) Models() []*Model { return slices.Clone(c.models) }

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

// ShowMemory writes memory as a person reads it on a spec sheet: whole
// GB ("24 GB"), or one decimal when not whole.
func ShowMemory(b uint64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%d GB", b>>30)
	}
	return fmt.Sprintf("%.1f GB", float64(b)/(1<<30))
}
