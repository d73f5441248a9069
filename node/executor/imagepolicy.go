package executor

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// ErrImageRefused is returned for an image a provider's rules refuse.
var ErrImageRefused = errors.New("image refused by this provider's rules")

// ImagePolicy is a provider's rules for the images its leases run: when
// Allow is not empty an image must match one of its patterns, and it must
// match none of Deny's. Names compare after Docker's normalisation
// ("evil", "library/evil" and "docker.io/library/evil:latest" are one
// repository) and on path boundaries ("nvcr.io/nvidia" matches
// "nvcr.io/nvidia/pytorch" but not "nvcr.io/nvidia-evil/x"). A pattern is
//   - a repository ("nvcr.io/nvidia", "evil"): it and everything under it;
//   - a namespace or registry with a trailing slash ("nvcr.io/",
//     "idlegrid-test/"): everything in it;
//   - a reference with a tag or digest ("evil:1", "x@sha256:…"): that one;
//   - an image ID ("sha256:<hex>", 12 hex digits at least): that image,
//     however it is named; the engine's Check applies these.
type ImagePolicy struct {
	Allow, Deny []string
}

var imageID = regexp.MustCompile(`^(sha256:)?[0-9a-f]{12,64}$`)

// isID reports whether s names an image by its ID rather than its name.
func isID(s string) bool { return imageID.MatchString(s) }

// CheckRef applies the name rules to ref as a renter wrote it; an image
// named by its ID passes here, for the engine to check by what it is.
func (p ImagePolicy) CheckRef(ref string) error {
	if isID(ref) {
		return nil
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Errorf("%w: %q is not an image reference: %v", ErrImageRefused, ref, err)
	}
	return p.checkNamed(ref, []reference.Named{named}, "")
}

// CheckImage applies every rule to an image the engine holds: its ID,
// and each of its tags and digests (an image asked for by ID is judged
// by all of its names).
func (p ImagePolicy) CheckImage(ref, id string, names []string) error {
	var named []reference.Named
	for _, n := range names {
		if r, err := reference.ParseNormalizedNamed(n); err == nil {
			named = append(named, r)
		}
	}
	return p.checkNamed(ref, named, id)
}

func (p ImagePolicy) checkNamed(ref string, names []reference.Named, id string) error {
	for _, pat := range p.Deny {
		if slices.ContainsFunc(names, func(n reference.Named) bool { return matches(pat, n) }) || matchesID(pat, id) {
			return fmt.Errorf("%w: image %q is refused here (%q)", ErrImageRefused, ref, pat)
		}
	}
	if len(p.Allow) == 0 {
		return nil
	}
	for _, pat := range p.Allow {
		if slices.ContainsFunc(names, func(n reference.Named) bool { return matches(pat, n) }) || matchesID(pat, id) {
			return nil
		}
	}
	if len(names) == 0 && id == "" {
		return nil // an ID not yet resolved: the engine's check decides
	}
	return fmt.Errorf("%w: image %q is not allowed here: allowed are %v", ErrImageRefused, ref, p.Allow)
}

// matches reports whether the name pattern pat covers the image n.
func matches(pat string, n reference.Named) bool {
	if isID(pat) {
		return false
	}
	if prefix, ok := strings.CutSuffix(pat, "/"); ok { // a namespace or a registry
		probe, err := reference.ParseNormalizedNamed(prefix + "/x")
		if err != nil {
			return false
		}
		within := strings.TrimSuffix(probe.Name(), "x")
		return strings.HasPrefix(n.Name(), within)
	}
	p, err := reference.ParseNormalizedNamed(pat)
	if err != nil {
		return false
	}
	if reference.IsNameOnly(p) {
		return n.Name() == p.Name() || strings.HasPrefix(n.Name(), p.Name()+"/")
	}
	return p.String() == n.String() || p.String() == reference.TagNameOnly(n).String()
}

// matchesID reports whether pat is the ID (or a prefix of 12 hex digits
// or more) of the image id.
func matchesID(pat, id string) bool {
	if id == "" || !isID(pat) {
		return false
	}
	return strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), strings.TrimPrefix(pat, "sha256:"))
}
