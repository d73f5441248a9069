package executor

import (
	"errors"
	"testing"
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
