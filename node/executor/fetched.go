package executor

import (
	"context"
	"fmt"
	"regexp"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
)

// Fetcher is an executor whose images fetched for renters (pulled or
// loaded) a provider accounts for and removes in time.
type Fetcher interface {
	// ImageID is the ID of the image ref names now; "" when there is
	// none.
	ImageID(ctx context.Context, ref string) (string, error)
	// RemoveFetched undoes the fetch that made img: its names, where they
	// still name it, and then the image, unless a container uses it or
	// another name holds it (the provider's own tag pins an image). It
	// says which.
	RemoveFetched(ctx context.Context, img Image) (Kept, error)
}

// Kept says what became of an image RemoveFetched was asked to remove.
type Kept string

const (
	Removed    Kept = "removed" // gone from the engine
	KeptInUse  Kept = "in use"  // a container uses it
	KeptPinned Kept = "pinned"  // the provider has a name of its own for it
)

var _ Fetcher = (*Docker)(nil)

var fullImageID = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ImageID is the ID of the image ref names on the engine, "" for none.
func (d *Docker) ImageID(ctx context.Context, ref string) (string, error) {
	info, err := d.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", d.engineErr("inspect "+ref, err)
	}
	return info.ID, nil
}

// RemoveFetched removes a fetched image's names that still name it, and
// then the image if nothing else holds it.
func (d *Docker) RemoveFetched(ctx context.Context, img Image) (Kept, error) {
	if !fullImageID.MatchString(img.ID) {
		return "", fmt.Errorf("remove image %q: want sha256: and 64 hex digits", img.ID)
	}
	for _, name := range img.Names {
		// A name pulled again since may name another image now: that
		// one is not this fetch's to remove.
		if id, err := d.ImageID(ctx, name); err != nil || id != img.ID {
			continue
		}
		if _, err := d.cli.ImageRemove(ctx, name, image.RemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			if cerrdefs.IsConflict(err) {
				return KeptInUse, nil // a container uses it
			}
			return "", d.engineErr("remove "+name, err)
		}
	}
	info, err := d.cli.ImageInspect(ctx, img.ID)
	if cerrdefs.IsNotFound(err) {
		return Removed, nil
	}
	if err != nil {
		return "", d.engineErr("inspect "+img.ID, err)
	}
	if len(info.RepoTags) > 0 {
		return KeptPinned, nil // a name of the provider's pins it
	}
	if _, err := d.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{PruneChildren: true}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return Removed, nil
		}
		if cerrdefs.IsConflict(err) {
			return KeptInUse, nil // a container uses it
		}
		return "", d.engineErr("remove "+img.ID, err)
	}
	return Removed, nil
}
