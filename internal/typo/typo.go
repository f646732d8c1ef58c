// Package typo finds the known name that a mistyped one was probably meant
// to be, for "did you mean" suggestions on the command lines.
package typo

import "strings"

// maxDistance is the largest edit distance suggested: two slips (a
// swapped pair, a missing and a doubled letter) are a typo; more is another
// word, and suggesting it would mislead.
const maxDistance = 2

// Closest returns the name of known nearest to name by edit distance, if it
// is within two edits, or else a name three edits away that name is a
// prefix of (an abbreviation: --etcd for --etcd-ca). It returns "" when
// nothing is near enough. Ties go to the earlier name in known.
func Closest(name string, known []string) string {
	best, bestD := "", maxDistance+1
	for _, k := range known {
		if d := distance(name, k); d < bestD || (d == bestD && best == "" && strings.HasPrefix(k, name)) {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
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
