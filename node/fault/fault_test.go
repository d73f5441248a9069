package fault

import (
	"errors"
	"io"
	"testing"
)

// Each way of making a failure gives the kind it names and no other, and
// keeps what it wraps reachable.
func TestAFailureIsOfTheKindItWasMadeWith(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind error
		text string
	}{
		{Fieldf("count", 0, "want 1 to %d", 1024), ErrInvalid, "count 0: want 1 to 1024"},
		{&Field{Name: "image", Want: "name the container image to run"}, ErrInvalid, "image: name the container image to run"},
		{Invalidf("max_price: %w", io.ErrUnexpectedEOF), ErrInvalid, "max_price: unexpected EOF"},
		{NotFoundf("no lease %q here", "l-1"), ErrNotFound, `no lease "l-1" here`},
		{Conflictf("lease %s already ended", "l-1"), ErrConflict, "lease l-1 already ended"},
		{Unavailablef("this node sells no GPUs"), ErrUnavailable, "this node sells no GPUs"},
		{Mark(ErrConflict, io.EOF), ErrConflict, "EOF"},
		{io.EOF, nil, "EOF"},
	} {
		if c.err.Error() != c.text {
			t.Errorf("%v: says %q, want %q", c.err, c.err.Error(), c.text)
		}
		if got := KindOf(c.err); got != c.kind {
			t.Errorf("%v: of kind %v, want %v", c.err, got, c.kind)
		}
		for _, k := range Kinds {
			if errors.Is(c.err, k) != (k == c.kind) {
				t.Errorf("%v: errors.Is %v = %v", c.err, k, errors.Is(c.err, k))
			}
		}
	}
	if !errors.Is(Invalidf("max_price: %w", io.ErrUnexpectedEOF), io.ErrUnexpectedEOF) {
		t.Error("Invalidf lost the error it wraps")
	}
	var f *Field
	if !errors.As(Invalid(Fieldf("count", 0, "want 1")), &f) || f.Name != "count" {
		t.Error("a Field marked again is no longer found with errors.As")
	}
	if Mark(ErrInvalid, nil) != nil {
		t.Error("Mark of nil is not nil")
	}
}
