package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idlegrid/idlegrid/node/api"
)

// A rental that walked past thousands of made-up offers prints why its
// last attempts failed and how many came before, not a line for each.
func TestAFailedRentalPrintsItsLastAttemptsAndCountsTheRest(t *testing.T) {
	for _, n := range []int{0, 3, triedShown, 10_000} {
		var tried []api.Attempt
		for i := range n {
			tried = append(tried, api.Attempt{Provider: fmt.Sprintf("12D3KooWprovider%05d", i), Stage: "locate", Reason: fmt.Sprint("not found ", i)})
		}
		var lines []string
		printTried(func(s string) { lines = append(lines, s) }, tried)
		want := min(n, triedShown)
		if n > triedShown {
			want++
			if lines[0] != fmt.Sprintf("tried %d more candidates before these", n-triedShown) {
				t.Errorf("%d attempts: first line %q", n, lines[0])
			}
		}
		if len(lines) != want {
			t.Fatalf("%d attempts: %d lines, want %d", n, len(lines), want)
		}
		if n > 0 && !strings.HasSuffix(lines[len(lines)-1], fmt.Sprint("not found ", n-1)) {
			t.Errorf("%d attempts: the last line %q is not the last attempt", n, lines[len(lines)-1])
		}
	}
}
