package executor

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

// Issue 11, attack 9: with "evil" denied, "docker.io/library/evil:latest"
// and "library/evil" ran (the rules were prefixes of the raw string), and
// "nvcr.io/nvidia" allowed "nvcr.io/nvidia-evil/…".
func TestImagePolicyNormalisesAndMatchesOnPathBoundaries(t *testing.T) {
	deny := ImagePolicy{Deny: []string{"evil", "bad/tool:1"}}
	allow := ImagePolicy{Allow: []string{"nvcr.io/nvidia", "idlegrid-test/", "registry.example:5000/", "pytorch/pytorch:2.4"}}
	for _, c := range []struct {
		p      ImagePolicy
		ref    string
		refuse bool
	}{
		{deny, "evil", true},
		{deny, "evil:latest", true},
		{deny, "library/evil", true},
		{deny, "docker.io/library/evil:latest", true},
		{deny, "index.docker.io/library/evil", true},
		{deny, "evil@sha256:" + hex64, true},
		{deny, "evil-twin", false},
		{deny, "someone/evil", false},
		{deny, "bad/tool:1", true},
		{deny, "docker.io/bad/tool:1", true},
		{deny, "bad/tool:2", false},
		{deny, "Evil", true}, // not a reference: refused, never run unchecked
		{allow, "nvcr.io/nvidia/pytorch:24.05-py3", false},
		{allow, "nvcr.io/nvidia", false},
		{allow, "nvcr.io/nvidia-evil/x", true},
		{allow, "nvcr.io/nvidiax", true},
		{allow, "idlegrid-test/busybox:1", false},
		{allow, "docker.io/idlegrid-test/busybox:1", false},
		{allow, "idlegrid-testing/busybox", true},
		{allow, "registry.example:5000/team/img", false},
		{allow, "registry.example/team/img", true},
		{allow, "pytorch/pytorch:2.4", false},
		{allow, "pytorch/pytorch", true},
		{allow, "pytorch/pytorch:2.5", true},
		{allow, "sha256:" + hex64, false}, // an ID: the engine judges it by its names
	} {
		err := c.p.CheckRef(c.ref)
		if refused := errors.Is(err, ErrImageRefused); refused != c.refuse || err != nil && !refused {
			t.Errorf("%v on %q: %v, want refused %v", c.p, c.ref, err, c.refuse)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// An image asked for by ID or digest is judged by what the engine knows
// of it: every tag and digest, and the ID itself.
func TestImagePolicyJudgesAnImageByAllItsNames(t *testing.T) {
	id := "sha256:" + hex64
	names := []string{"evil:latest", "evil@sha256:" + hex64}
	for _, c := range []struct {
		p      ImagePolicy
		refuse bool
	}{
		{ImagePolicy{Deny: []string{"evil"}}, true},
		{ImagePolicy{Deny: []string{hex64[:12]}}, true},
		{ImagePolicy{Deny: []string{"sha256:" + hex64}}, true},
		{ImagePolicy{Deny: []string{"good"}}, false},
		{ImagePolicy{Allow: []string{"good"}}, true},
		{ImagePolicy{Allow: []string{"good", hex64[:16]}}, false},
		{ImagePolicy{Allow: []string{"evil"}}, false},
	} {
		err := c.p.CheckImage(id, id, names)
		if refused := errors.Is(err, ErrImageRefused); refused != c.refuse {
			t.Errorf("%v: %v, want refused %v", c.p, err, c.refuse)
		}
	}
}

// Whatever a renter names and whatever a provider writes as a rule: a
// denied repository is refused under every spelling of it, and an
// allowed name is the allowed repository or under it, on a path
// boundary.
func FuzzImagePolicy(f *testing.F) {
	for _, c := range [][2]string{
		{"evil", "docker.io/library/evil:latest"}, {"nvcr.io/nvidia", "nvcr.io/nvidia-evil/x"},
		{"idlegrid-test/", "idlegrid-test/busybox:1"}, {"bad/tool:1", "bad/tool@sha256:" + hex64},
		{"sha256:" + hex64, hex64[:12]}, {"registry.example:5000/", "registry.example:5000/a/b"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, pat, ref string) {
		denied := ImagePolicy{Deny: []string{pat}}.CheckRef(ref)
		allowed := ImagePolicy{Allow: []string{pat}}.CheckRef(ref)
		if denied != nil && !errors.Is(denied, ErrImageRefused) || allowed != nil && !errors.Is(allowed, ErrImageRefused) {
			t.Fatalf("an error that is not ErrImageRefused: %v, %v", denied, allowed)
		}
		named, err := reference.ParseNormalizedNamed(ref)
		p, perr := reference.ParseNormalizedNamed(pat)
		if err != nil || perr != nil || !reference.IsNameOnly(p) || isID(pat) || isID(ref) {
			return
		}
		if named.Name() == p.Name() && denied == nil {
			t.Fatalf("deny %q let %q (%s) by", pat, ref, named.Name())
		}
		if allowed == nil && named.Name() != p.Name() && !strings.HasPrefix(named.Name(), p.Name()+"/") {
			t.Fatalf("allow %q let %q (%s) by, not on a path boundary", pat, ref, named.Name())
		}
	})
}
