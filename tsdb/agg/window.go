package agg

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Window is the aggregate of the points of one window [Start, Start+width).
type Window struct {
	Start int64 // ns since the epoch, a multiple of the width
	Partial
}

// WindowStart returns the start of the window of width every holding t: the greatest
// multiple of every not after t (flooring toward −∞). A window that would start before
// the earliest representable time starts at math.MinInt64.
func WindowStart(t, every int64) int64 {
	m := t % every
	if m < 0 {
		m += every
	}
	if t < math.MinInt64+m {
		return math.MinInt64
	}
	return t - m
}

// windowEnd returns the end of the window starting at start, saturating at MaxInt64.
func windowEnd(start, every int64) int64 {
	if start > math.MaxInt64-every {
		return math.MaxInt64
	}
	return start + every
}

// WindowCount returns how many windows of width every meet [from, to), the windows
// cut by from or to included: the most an aggregate of the range can return. It is 0
// for an empty range and saturates at MaxInt64.
func WindowCount(from, to, every int64) int64 {
	if from >= to {
		return 0
	}
	// The starts may be further apart than an int64 holds; as unsigned they are not.
	n := (uint64(WindowStart(to-1, every))-uint64(WindowStart(from, every)))/uint64(every) + 1
	return int64(min(n, math.MaxInt64))
}

// PageEnd returns the end of the page of [lo, to) that starts at lo and meets at most n
// (≥ 1) windows of width every: a window boundary, or to. Asking for [lo, PageEnd), then
// from there on, splits a range into pages no window straddles, so the pages' windows
// are the range's, in order, with nothing to merge.
func PageEnd(lo, to, every, n int64) int64 {
	start := WindowStart(lo, every)
	if n < 1 || every > math.MaxInt64/n || start > math.MaxInt64-n*every {
		return to // a page of n windows reaches past the end of time
	}
	return min(start+n*every, to)
}

// ErrBadWidth is wrapped by the error for a window width that is not positive.
var ErrBadWidth = errors.New("window width must be positive")

// CheckWidth checks a window width in nanoseconds.
func CheckWidth(every int64) error {
	if every <= 0 {
		return fmt.Errorf("%w, got %d ns", ErrBadWidth, every)
	}
	return nil
}

// Windows returns the non-empty windows of width every over the points of p with
// from <= t < to, ascending; p must be sorted with distinct timestamps. A window cut
// by from or to aggregates only the points inside [from, to) and keeps its aligned
// Start. every must be positive.
func Windows(p *series.Points, from, to, every int64) []Window {
	return AppendWindows(nil, p, from, to, every)
}

// AppendWindows is Windows appending to dst.
func AppendWindows(dst []Window, p *series.Points, from, to, every int64) []Window {
	n := p.Len()
	i := sort.Search(n, func(k int) bool { return p.T[k] >= from })
	end := sort.Search(n, func(k int) bool { return p.T[k] >= to })
	for i < end {
		start := WindowStart(p.T[i], every)
		we := windowEnd(start, every)
		// The window's points end at the first timestamp >= we. Windows usually hold few
		// points or many: a short linear probe, then a binary search.
		j := i + 1
		for probe := 0; j < end && p.T[j] < we && probe < 8; probe++ {
			j++
		}
		if j < end && p.T[j] < we {
			j += sort.Search(end-j, func(k int) bool { return p.T[j+k] >= we })
		}
		dst = append(dst, Window{Start: start, Partial: FromPoints(p, i, j)})
		i = j
	}
	return dst
}

// MergeWindows merges two ascending window lists of one width whose points are
// disjoint (different shards, say): windows with the same Start merge their partials.
func MergeWindows(a, b []Window) []Window {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]Window, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].Start < b[j].Start:
			out = append(out, a[i])
			i++
		case a[i].Start > b[j].Start:
			out = append(out, b[j])
			j++
		default:
			out = append(out, Window{Start: a[i].Start, Partial: Merge(a[i].Partial, b[j].Partial)})
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// Combine merges ascending window lists of one width whose points are disjoint into
// one ascending list, in O(N log N) for N windows in all.
func Combine(lists ...[]Window) []Window {
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	all := make([]Window, 0, total)
	for _, l := range lists {
		all = append(all, l...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Start < all[j].Start })
	out := all[:0]
	for _, w := range all {
		if k := len(out) - 1; k >= 0 && out[k].Start == w.Start {
			out[k].Partial = Merge(out[k].Partial, w.Partial)
			continue
		}
		out = append(out, w)
	}
	return out
}
