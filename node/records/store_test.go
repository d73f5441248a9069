package records

import (
	"context"
	"errors"
	"testing"

	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
)

// IDs that a path would collapse ("..", ".") are kept apart from every
// other key: a lease so named cannot overwrite the store's root or
// another lease, nor be found under another ID.
func TestDotIDsDoNotCollapseKeys(t *testing.T) {
	ctx := context.Background()
	s := Store{D: dssync.MutexWrap(ds.NewMapDatastore())}
	for _, id := range []string{"lease-a", "..", ".", "lease-a/.."} {
		if err := s.Put(ctx, &Lease{ID: id, Role: Provider, State: Accepted}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.All(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("%d records (%v), want 4", len(all), err)
	}
	for _, id := range []string{"lease-a", "..", ".", "lease-a/.."} {
		if r, err := s.Get(ctx, id); err != nil || r.ID != id {
			t.Errorf("Get(%q) = %v, %v", id, r, err)
		}
	}
	if _, err := s.Get(ctx, "lease-b"); !errors.Is(err, ds.ErrNotFound) {
		t.Errorf("an unknown ID: %v", err)
	}
}
