package httpapi

import (
	"cmp"
	"errors"
	"slices"

	"github.com/tsdht/tsdht/tsdb/series"
)

// A raw SELECT with a condition on a field (SELECT * FROM cpu WHERE usage_user > 90)
// reads the condition's fields first and the other fields only where the condition
// holds.
//
// whereFields keeps, of a series the condition filters, only the points at times the
// condition holds at; when it does not hold where its fields are all null (condHolds'
// null), those times are among the times the condition's fields have points, so every
// point kept lies in the spans of consecutive such times where it holds. prefetch
// therefore reads in two rounds, each one request per node: the condition's fields
// (and the series it does not filter) over the statement's range, then each other
// series over the spans of its tag set (ReadRanges, an item per span), nothing of a
// series whose tag set the condition holds nowhere. The answer is unchanged: the
// points outside the spans are the ones whereFields would drop.

// condSpans bounds the spans of one tag set read in the second round, and condApart
// is how many times of the condition's fields apart two spans must be to be read as
// two: each span is an item of the read, and each item reads the shards it touches
// whole, so a span of its own pays only when the gap before it holds whole shards
// (an HTTP writer's series holds at most 600 points a shard, docs/cluster.md).
//
// condLater is how many times as many series as the first round the second must read
// for the statement to read in two rounds: the second round is one more request per
// node, worth it when the series it narrows are most of those read (SELECT * with a
// condition on one field), not when they are a few beside the condition's.
const (
	condLater = 2
	condSpans = 8
	condApart = 1200
)

// prefetchPoints reads the points of keys at once into ex.prefetched: in one round,
// or in two when the statement is a raw SELECT whose field condition filters some of
// them (above). It stops at the statement's point cap, leaving the rest to readSeries.
func (ex *executor) prefetchPoints(mr ManyReader, keys []string) {
	if ex.prefetched == nil {
		ex.prefetched = make(map[string]series.Points, len(keys))
	}
	held := 0
	first, later := ex.condFirst(keys)
	if len(first) == 0 || len(later) == 0 {
		ex.readPoints(mr, ex.wholeRanges(keys), &held)
		return
	}
	if !ex.readPoints(mr, ex.wholeRanges(first), &held) {
		return
	}
	items, ok := ex.passedRanges(later)
	if ok {
		ex.readPoints(mr, items, &held)
	}
}

// condFirst splits keys into those read in the first round and those the field
// condition filters, read second over where it holds; later is empty unless the
// statement is a raw SELECT and they are at least condLater times as many as the
// others.
func (ex *executor) condFirst(keys []string) (first, later []string) {
	w := ex.p.where
	if !ex.p.raw || w == nil {
		return keys, nil
	}
	for _, k := range keys {
		if w.setOf(k) != nil && !w.names(k) {
			later = append(later, k)
		} else {
			first = append(first, k)
		}
	}
	if len(later) < condLater*len(first) {
		return keys, nil
	}
	return first, later
}

// wholeRanges is each key over the range it is read over (rangeOf).
func (ex *executor) wholeRanges(keys []string) []KeyRange {
	items := make([]KeyRange, len(keys))
	for i, k := range keys {
		items[i].Key = k
		items[i].From, items[i].To = ex.rangeOf(k)
	}
	return items
}

// passedRanges returns the items of the second round: each key over the spans of its
// tag set where the condition holds, within the key's range. A key whose set the
// condition holds nowhere gets no item and is prefetched empty. ok is false when the
// condition could not be evaluated (its error is readSeries' to report).
func (ex *executor) passedRanges(keys []string) (items []KeyRange, ok bool) {
	spans := map[*condSet][][2]int64{}
	for _, k := range keys {
		set := ex.p.where.setOf(k)
		sp, seen := spans[set]
		if !seen {
			h, err := ex.condHolds(set)
			if err != nil {
				return nil, false
			}
			sp = h.passed(condApart, condSpans)
			spans[set] = sp
		}
		from, to := ex.rangeOf(k)
		if sp == nil {
			sp = [][2]int64{{from, to}} // it holds where its fields are null: all of it
		}
		n := len(items)
		for _, s := range sp {
			if lo, hi := max(s[0], from), min(s[1], to); lo < hi {
				items = append(items, KeyRange{Key: k, From: lo, To: hi})
			}
		}
		if len(items) == n {
			ex.prefetched[k] = series.Points{}
		}
	}
	return items, true
}

// passed returns the spans [from, to) of the times at which the condition holds, in
// order: two such times at most apart times of the condition's fields from each other
// (1: consecutive) lie in one span, and past most spans those across the shortest
// gaps are joined. nil when it holds where its fields are null (at times not among
// h.t), and empty when it holds at none.
func (h *condHolds) passed(apart, most int) [][2]int64 {
	if h.null {
		return nil
	}
	spans := [][2]int64{}
	last := -1 // the index in h.t of the last time it holds at
	for i, ok := range h.ok {
		switch {
		case !ok:
			continue
		case last >= 0 && i-last <= apart:
			spans[len(spans)-1][1] = h.t[i] + 1
		default:
			spans = append(spans, [2]int64{h.t[i], h.t[i] + 1})
		}
		last = i
	}
	if len(spans) <= most {
		return spans
	}
	// Keep the most-1 widest gaps, join across the others.
	gaps := make([]int, len(spans)-1) // gap i lies between spans i and i+1
	for i := range gaps {
		gaps[i] = i
	}
	slices.SortStableFunc(gaps, func(a, b int) int {
		return cmp.Compare(spans[b+1][0]-spans[b][1], spans[a+1][0]-spans[a][1])
	})
	cuts := gaps[:most-1]
	slices.Sort(cuts)
	out := make([][2]int64, 0, most)
	lo := 0
	for _, c := range cuts {
		out = append(out, [2]int64{spans[lo][0], spans[c][1]})
		lo = c + 1
	}
	return append(out, [2]int64{spans[lo][0], spans[len(spans)-1][1]})
}

// readPoints reads items at once into ex.prefetched, with ReadMany when every item is
// a whole key over the statement's range, else with ReadRanges. A key of several
// items (ascending, disjoint spans) gets their points one after the other; a key one
// of whose items failed is left to readSeries, which reads it again and says why.
// held counts the points read; false when they passed the statement's cap.
func (ex *executor) readPoints(mr ManyReader, items []KeyRange, held *int) bool {
	if len(items) == 0 {
		return true
	}
	var rs []ReadResult
	if ex.ranges == nil && wholeKeys(items, ex.p.from, ex.p.to) {
		keys := make([]string, len(items))
		for i, it := range items {
			keys[i] = it.Key
		}
		rs = mr.ReadMany(ex.ctx, keys, ex.p.from, ex.p.to)
	} else {
		rs = mr.ReadRanges(ex.ctx, items)
	}
	for i := 0; i < len(items); {
		k := items[i].Key
		j := i + 1
		for j < len(items) && items[j].Key == k {
			j++
		}
		pts := rs[i].Pts
		failed := false
		for n, r := range rs[i:j] {
			if r.Err != nil && !errors.Is(r.Err, ErrUnknownSeries) {
				failed = true
				break
			}
			if n > 0 && r.Pts.Len() > 0 {
				if pts.Len() == 0 {
					pts.Type = r.Pts.Type
				}
				appendPoints(&pts, &r.Pts) // a later span: later times
			}
		}
		i = j
		if failed {
			continue
		}
		if *held += pts.Len(); *held > ex.h.cfg.MaxQueryPoints {
			return false // readSeries reads the rest, and the statement is refused at its cap
		}
		ex.prefetched[k] = pts
	}
	return true
}

// wholeKeys reports whether items are distinct keys each over [from, to).
func wholeKeys(items []KeyRange, from, to int64) bool {
	for i, it := range items {
		if it.From != from || it.To != to || (i > 0 && items[i-1].Key == it.Key) {
			return false
		}
	}
	return true
}
