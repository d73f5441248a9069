package spell

import "testing"

func TestNearestNamesTheWordATypoMeant(t *testing.T) {
	words := []string{"init", "rent", "provider.price", "provider.price_floor", "max-price", "id"}
	for _, c := range []struct{ name, want string }{
		{"rnet", "rent"},
		{"provider.prce", "provider.price"},
		{"max-prce", "max-price"},
		{"provider.pri", "provider.price"}, // a beginning
		{"xyzzy", ""},
		{"x", ""}, // two edits from "id", but every letter changed
		{"", ""},
	} {
		if got := Nearest(c.name, words); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"rnet", "rent", 1}, {"rnet", "init", 2}, {"ab", "ba", 1}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
