package coord

import (
	"slices"
	"strings"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// mergeMembers merges the replicas' answers of one page of a posting list into one
// list sorted by key, a key several replicas answered merged by catalog.MergeMember.
// A store answers in key order, so the answers are merged as they are, in one pass
// each: a page of thousands of members is not sorted again. An answer out of order
// (a peer's bug) is sorted first, so the result never depends on it.
func mergeMembers(answers [][]catalog.Member) []catalog.Member {
	var out []catalog.Member
	for _, a := range answers {
		out = mergeTwo(out, ascending(a))
	}
	return out
}

// ascending returns ms sorted by key, each key once: ms itself when it already is.
func ascending(ms []catalog.Member) []catalog.Member {
	byKey := func(a, b catalog.Member) int { return strings.Compare(a.Key, b.Key) }
	if slices.IsSortedFunc(ms, byKey) && !hasRepeats(ms) {
		return ms
	}
	s := slices.Clone(ms)
	slices.SortStableFunc(s, byKey)
	out := s[:0]
	for _, m := range s {
		if n := len(out); n > 0 && out[n-1].Key == m.Key {
			out[n-1] = catalog.MergeMember(out[n-1], m)
			continue
		}
		out = append(out, m)
	}
	return out
}

func hasRepeats(ms []catalog.Member) bool {
	for i := 1; i < len(ms); i++ {
		if ms[i].Key == ms[i-1].Key {
			return true
		}
	}
	return false
}

// mergeTwo merges two lists sorted by key, each key once.
func mergeTwo(a, b []catalog.Member) []catalog.Member {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]catalog.Member, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i].Key, b[j].Key); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, catalog.MergeMember(a[i], b[j]))
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
