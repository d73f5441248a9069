package node

import (
	"context"
)

// leaseImages are the images the provider's leases name, live or yet to
// start: those fetched for renters stay while a lease names them.
func (lo *leaseOwner) leaseImages(ctx context.Context) []string {
	var refs []string
	lo.own.do(ctx, func(st *leaseState) {
		for _, l := range st.live {
			if img := l.lease.GetWorkload().GetImage(); img != "" {
				refs = append(refs, img)
			}
		}
	})
	return refs
}
