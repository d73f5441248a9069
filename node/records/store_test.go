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

// An end is final: a writer holding an older copy of a lease's record
// (a follow of it that another one ended meanwhile) cannot put back a
// record that says it is still open, and the receipt stays.
func TestAnEndedLeaseIsNotReopened(t *testing.T) {
	ctx := context.Background()
	s := Store{D: dssync.MutexWrap(ds.NewMapDatastore())}
	stale := &Lease{ID: "lease-a", Role: Renter, State: Active, Beats: 3}
	if err := s.Put(ctx, stale, nil); err != nil {
		t.Fatal(err)
	}
	ended := *stale
	ended.State, ended.Receipt = Cancelled, []byte("receipt")
	if err := s.Put(ctx, &ended, nil); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{Active, Settling, Accepted} {
		stale.State = state
		if err := s.Put(ctx, stale, nil); !errors.Is(err, ErrEnded) {
			t.Errorf("a record %s put over an ended one: %v, want ErrEnded", state, err)
		}
	}
	if r, err := s.Get(ctx, "lease-a"); err != nil || r.State != Cancelled || string(r.Receipt) != "receipt" {
		t.Fatalf("the stored record: %+v, %v; want the ended one", r, err)
	}
	// An ended record may be replaced by another ended one (the receipt,
	// countersigned since).
	ended.Receipt = []byte("countersigned")
	if err := s.Put(ctx, &ended, nil); err != nil {
		t.Errorf("an ended record over an ended one: %v", err)
	}
}
