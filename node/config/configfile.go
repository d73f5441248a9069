package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idlegrid/idlegrid/internal/atomicfile"
	"github.com/idlegrid/idlegrid/market/spell"
	toml "github.com/pelletier/go-toml/v2"
)

const configHeader = `# idlegrid node configuration.
# Every setting is written out with its default. Change one with
#   idlegrid config set KEY VALUE
# which checks the value before writing; see the README for what each does.

`

// ParseConfig decodes config.toml strictly (an unknown key or a value of
// the wrong type is an error naming its line) and validates the result.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := checkDurations(data); err != nil {
		return Config{}, err
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, explainTOML(err)
	}
	// A repository made before [settlement] existed pays by the ledger,
	// as it did.
	if c.Settlement == (SettlementConfig{}) {
		c.Settlement = DefaultSettlement()
	}
	// And one made before [datasets] keeps datasets to the default bound.
	if c.Datasets == (DatasetsConfig{}) {
		c.Datasets.CacheGiB = DefaultDatasetsCacheGiB
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// explainTOML turns go-toml's errors into one line naming the key and line.
func explainTOML(err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		e := strict.Errors[0]
		row, _ := e.Position()
		return fmt.Errorf("%w: line %d: %w", ErrConfig, row, unknownKey(strings.Join(e.Key(), "."), DefaultConfig(ProfileProvider).Keys()))
	}
	var dec *toml.DecodeError
	if errors.As(err, &dec) {
		row, _ := dec.Position()
		if key := dec.Key(); len(key) > 0 {
			return fmt.Errorf("%w: line %d: %s: %s", ErrConfig, row, strings.Join(key, "."), typeHint(dec))
		}
		return fmt.Errorf("%w: line %d: %s", ErrConfig, row, typeHint(dec))
	}
	return fmt.Errorf("%w: %v", ErrConfig, err)
}

// Marshal renders the config as config.toml, every field with its comment.
func (c Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(configHeader)
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(false)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return buf.Bytes(), nil
}

// LoadConfig reads and validates a config file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// WriteConfig validates c and replaces path atomically: a reader sees the
// old file or the new one, never half of one, and an invalid config is
// never written.
func WriteConfig(path string, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	data, err := c.Marshal()
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}

// Tree renders the config as nested maps keyed by the TOML names, the
// shape `config show --json` prints.
func (c Config) Tree() (map[string]any, error) {
	data, err := toml.Marshal(c)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Keys lists every settable key in dotted form, sorted.
func (c Config) Keys() []string {
	m, err := c.Tree()
	if err != nil {
		return nil
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			keys = append(keys, prefix+k)
		}
	}
	walk("", m)
	slices.Sort(keys)
	return keys
}

// Get returns the value at a dotted key such as "network.conn_low".
func (c Config) Get(key string) (any, error) {
	m, err := c.Tree()
	if err != nil {
		return nil, err
	}
	var cur any = m
	for _, part := range strings.Split(key, ".") {
		sub, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: %w", ErrConfig, unknownKey(key, c.Keys()))
		}
		if cur, ok = sub[part]; !ok {
			return nil, fmt.Errorf("%w: %w", ErrConfig, unknownKey(key, c.Keys()))
		}
	}
	return cur, nil
}

// unknownKey says that key is none of keys, naming the one it most
// likely misspells.
func unknownKey(key string, keys []string) error {
	if near := spell.Nearest(key, keys); near != "" {
		return fmt.Errorf("unknown key %q; did you mean %q? (`idlegrid config show` lists every key)", key, near)
	}
	return fmt.Errorf("unknown key %q (`idlegrid config show` lists every key)", key)
}

// Set returns a copy of c with key set to value, validated. value is read
// as a TOML value (30, true, "30s", ["/ip4/…"]); anything that is not one
// is taken as a string, so `set log.level debug` needs no quotes. A key
// under a map (log.subsystems.NAME) may be new; any other must exist.
func (c Config) Set(key, value string) (Config, error) {
	parts := strings.Split(key, ".")
	if _, err := c.Get(key); err != nil {
		parent, perr := c.Get(strings.Join(parts[:len(parts)-1], "."))
		if _, isMap := parent.(map[string]any); perr != nil || !isMap || len(parts) < 2 || !isMapField(parts[:len(parts)-1]) {
			return Config{}, err
		}
	}
	literal := value
	var probe map[string]any
	current, _ := c.Get(key)
	_, isString := current.(string)
	if toml.Unmarshal([]byte("v = "+value), &probe) != nil || isString && !strings.HasPrefix(value, `"`) && !strings.HasPrefix(value, "'") {
		literal = strconv.Quote(value) // a bare word, or a number for a string setting such as a price
	}
	var doc strings.Builder
	if len(parts) > 1 {
		fmt.Fprintf(&doc, "[%s]\n", strings.Join(parts[:len(parts)-1], "."))
	}
	fmt.Fprintf(&doc, "%s = %s\n", parts[len(parts)-1], literal)

	if err := checkDurations([]byte(doc.String())); err != nil {
		return Config{}, err
	}
	out := c.Clone()
	dec := toml.NewDecoder(strings.NewReader(doc.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return Config{}, fmt.Errorf("%w: %s = %s: %v", ErrConfig, key, value, typeHint(err))
	}
	if err := out.Validate(); err != nil {
		return Config{}, err
	}
	return out, nil
}

func isMapField(parts []string) bool {
	return strings.Join(parts, ".") == "log.subsystems"
}

var tomlTypeRE = regexp.MustCompile(`cannot decode TOML (\w+) into struct field \S+ of type (\S+)`)

// typeHint rewrites go-toml's Go-centred type errors in the config's terms.
func typeHint(err error) string {
	msg := err.Error()
	if m := tomlTypeRE.FindStringSubmatch(msg); m != nil {
		want := map[string]string{"int": "an integer", "bool": "true or false", "string": "a string", "[]string": "a list of strings",
			"node.Duration": "a quoted duration such as \"30s\" or \"5m\""}[m[2]]
		if want == "" {
			want = "a " + m[2]
		}
		return fmt.Sprintf("want %s, got a TOML %s", want, m[1])
	}
	return strings.TrimPrefix(msg, "toml: ")
}

// clone deep-copies the slices and maps so a Set never aliases c.
func (c Config) Clone() Config {
	out := c
	out.Swarm.AllowList = slices.Clone(c.Swarm.AllowList)
	out.Network.Listen = slices.Clone(c.Network.Listen)
	out.Network.Announce = slices.Clone(c.Network.Announce)
	out.Network.Bootstrap = slices.Clone(c.Network.Bootstrap)
	p := &out.Provider
	p.Tiers = slices.Clone(p.Tiers)
	p.Weekly = slices.Clone(p.Weekly)
	p.WorkloadClasses = slices.Clone(p.WorkloadClasses)
	p.ImageAllow = slices.Clone(p.ImageAllow)
	p.ImageDeny = slices.Clone(p.ImageDeny)
	p.GPUs = slices.Clone(p.GPUs)
	p.Share = slices.Clone(p.Share)
	out.Log.Subsystems = make(map[string]string, len(c.Log.Subsystems))
	for k, v := range c.Log.Subsystems {
		out.Log.Subsystems[k] = v
	}
	return out
}

var durationType = reflect.TypeFor[Duration]()

// checkDurations refuses a duration setting written as a bare number:
// it has no unit, and go-toml would hand it over without naming the key.
func checkDurations(data []byte) error {
	var m map[string]any
	if toml.Unmarshal(data, &m) != nil {
		return nil // the strict decode reports syntax errors with their line
	}
	return walkDurations(reflect.TypeFor[Config](), m, "")
}

func walkDurations(t reflect.Type, m map[string]any, prefix string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		v, ok := m[name]
		if !ok {
			continue
		}
		switch {
		case f.Type == durationType:
			if _, isString := v.(string); !isString {
				return fmt.Errorf("%w: %s%s = %v: want a quoted duration such as \"30s\" or \"5m\"", ErrConfig, prefix, name, v)
			}
		case f.Type.Kind() == reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				if err := walkDurations(f.Type, sub, prefix+name+"."); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
