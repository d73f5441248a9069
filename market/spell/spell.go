// Package spell finds the word a misspelt one most likely meant, for the
// "did you mean" of every error that names an unknown word: a command, a
// flag, a config key, a query field. It imports nothing of ours.
package spell

import "strings"

// maxEdits is how far a name may be from the word it meant.
const maxEdits = 2

// Nearest is the word among words that name most likely misspells: the
// nearest within maxEdits edits (the first of equals), else, for a name
// of three bytes or more, the first word it begins; "" when none is near.
func Nearest(name string, words []string) string {
	if name == "" || len(name) > 64 {
		return "" // no word is near: spare the distances
	}
	best, bestD := "", maxEdits+1
	for _, w := range words {
		if d := Distance(name, w); d < bestD && d < len(name) {
			best, bestD = w, d
		}
	}
	if best == "" && len(name) >= 3 {
		for _, w := range words {
			if strings.HasPrefix(w, name) {
				return w
			}
		}
	}
	return best
}

// Distance is the edit distance between a and b, in bytes: the fewest
// insertions, deletions, substitutions and swaps of neighbours that turn
// one into the other ("rnet" is one swap from "rent", two changes from
// "init").
func Distance(a, b string) int {
	older := make([]int, len(b)+1) // the row before prev, for swaps
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], older[j-2]+1)
			}
		}
		older, prev, cur = prev, cur, older
	}
	return prev[len(b)]
}
