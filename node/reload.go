package node

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
)

// providerRestartOnly are the [provider] settings a running node cannot
// take on: they shape the lease owner, the GPU source and the node's own
// location, which start with the node.
var providerRestartOnly = []string{"enabled", "gpu_source", "share", "bronze_notice", "max_leases_per_renter", "min_renter_score", "country"}

// ReloadResult says what a Reload did.
type ReloadResult = api.ReloadResult

// ReloadFile reloads the repository's config.toml: Reload of what it
// holds now.
func (n *Node) ReloadFile() (ReloadResult, error) {
	cfg, err := n.repo.Config()
	if err != nil {
		return ReloadResult{}, err
	}
	return n.Reload(cfg)
}

// Reload takes on what can change while the node runs from cfg, the
// repository's configuration as it is now: the provider's terms (prices,
// windows, tiers, durations, workload and image policy, power and
// thermal caps, the GPUs of a static list), published at once in a new
// offer. It names the other settings that changed, which wait for a
// restart. An invalid cfg changes nothing.
func (n *Node) Reload(cfg config.Config) (ReloadResult, error) {
	if err := cfg.Validate(); err != nil {
		return ReloadResult{}, err
	}
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	was := n.cfg
	if n.reloaded != nil {
		was = *n.reloaded
	}
	live := func(key string) bool {
		section, field, _ := strings.Cut(key, ".")
		return section == "provider" && n.provider != nil && !slices.Contains(providerRestartOnly, strings.SplitN(field, ".", 2)[0])
	}
	var res ReloadResult
	for _, key := range changedKeys("", reflect.ValueOf(was), reflect.ValueOf(cfg)) {
		if live(key) {
			res.Applied = append(res.Applied, key)
		}
	}
	// What waits for a restart differs from the configuration the node
	// started with, however many reloads ago it changed.
	for _, key := range changedKeys("", reflect.ValueOf(n.cfg), reflect.ValueOf(cfg)) {
		if !live(key) {
			res.NeedRestart = append(res.NeedRestart, key)
		}
	}
	if len(res.Applied) > 0 {
		started := n.cfg.Provider // what stays as the node started
		next := cfg.Provider
		for _, f := range providerRestartOnly {
			setTOMLField(&next, f, fieldByTOML(reflect.ValueOf(started), f))
		}
		n.provider.Reconfigure(next)
		n.log.Info("configuration reloaded", "applied", strings.Join(res.Applied, ", "))
	}
	if len(res.NeedRestart) > 0 {
		n.log.Warn("changed settings wait for a restart", "settings", strings.Join(res.NeedRestart, ", "))
	}
	n.reloaded = &cfg
	return res, nil
}

// changedKeys lists the TOML keys (section.field, down to the first
// non-struct value) whose values differ between a and b.
func changedKeys(prefix string, a, b reflect.Value) []string {
	var out []string
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		av, bv := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(config.Duration{}) {
			out = append(out, changedKeys(key, av, bv)...)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			out = append(out, key)
		}
	}
	return out
}

// fieldByTOML is the field of struct v whose TOML key is name.
func fieldByTOML(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := range t.NumField() {
		if key, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); key == name {
			return v.Field(i)
		}
	}
	panic(fmt.Sprintf("no field %q in %s", name, t))
}

// setTOMLField sets the field of *p whose TOML key is name to v.
func setTOMLField(p *config.ProviderConfig, name string, v reflect.Value) {
	fieldByTOML(reflect.ValueOf(p).Elem(), name).Set(v)
}
