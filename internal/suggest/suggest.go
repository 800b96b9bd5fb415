// Package suggest finds the closest of a few candidate words, for
// "did you mean" hints in error messages (unknown keys, unknown modes).
// Pure and safe for concurrent use.
package suggest

import (
	"fmt"
	"strings"
)

// DidYouMean returns ` (did you mean "x"?)` for the candidate closest to s
// by edit distance (case-insensitive on s), when it is close enough: at
// most 2 edits, or a third of the candidate's length, and fewer edits than
// s has bytes. Otherwise it returns "".
func DidYouMean(s string, cands []string) string {
	best, bestD := "", 1<<30
	for _, c := range cands {
		d := editDistance(strings.ToLower(s), c)
		if d < bestD {
			best, bestD = c, d
		}
	}
	if best != "" && (bestD <= 2 || bestD <= len(best)/3) && bestD < len(s) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// editDistance is the Levenshtein distance in bytes; strings over 64 bytes
// are "far" (a large constant) to bound the cost.
func editDistance(a, b string) int {
	if len(a) > 64 {
		return 1 << 20
	}
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
