package lease

import (
	"context"
	"path/filepath"
)

// setupImages has the image server keep the images the leases name, and
// keep its account of what it fetched across restarts in the
// repository (stageDir's parent), when there is one.
func (lo *Owner) setupImages(stageDir string) {
	lo.images.inUse = lo.leaseImages
	if stageDir == "" {
		return
	}
	if err := lo.images.keepFile(filepath.Join(filepath.Dir(stageDir), FetchedImagesFile)); err != nil {
		lo.log.Warn("the images fetched for renters before this start are not known: they stay until removed by hand", "err", err)
	}
}

// leaseImages are the images the provider's leases name, live or yet to
// start: those fetched for renters stay while a lease names them.
func (lo *Owner) leaseImages(ctx context.Context) []string {
	var refs []string
	lo.own.Do(ctx, func(st *State) {
		for _, l := range st.Live {
			if img := l.lease.GetWorkload().GetImage(); img != "" {
				refs = append(refs, img)
			}
		}
	})
	return refs
}
