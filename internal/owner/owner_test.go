package owner

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// Functions run on the owner one at a time, in the order handed to it,
// and a call after Stop gets ErrClosed rather than waiting for ever.
func TestAnOwnerRunsWhatItIsHandedInOrderThenRefuses(t *testing.T) {
	o := New[*[]int]()
	var st []int
	o.Start(&st)
	ctx := context.Background()
	for i := range 100 {
		if err := o.Post(ctx, func(s *[]int) { *s = append(*s, i) }); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	if err := o.Do(ctx, func(s *[]int) { got = slices.Clone(*s) }); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("ran %v: out of order at %d", got, i)
		}
	}
	if len(got) != 100 {
		t.Fatalf("ran %d of 100 functions before Do", len(got))
	}
	o.Stop()
	if err := o.Do(ctx, func(*[]int) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Stop: %v, want ErrClosed", err)
	}
	if err := o.Post(ctx, func(*[]int) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("Post after Stop: %v, want ErrClosed", err)
	}
}
