package store

// A pair's time cover: what lets an append whose points fall before the pair's newest
// point skip reading the pair.
//
// Writers that send consecutive stretches of a series concurrently (several HTTP
// senders, each request parsed and combined in its own time) commit them out of order:
// a batch often starts before the pair's newest point while holding no timestamp the
// pair holds, only filling a gap. The summary's [minT, maxT] cannot tell such a batch
// from an overwrite, so countNew had to read (seek and decode) the pair's overlapping
// span. The cover keeps, with the cached summary, a few disjoint time ranges that
// every timestamp the pair holds falls in: a batch none of whose points falls in one
// is all new and overwrites nothing, with no read.
//
// The cover only ever over-approximates: an append adds its batch's [first, last];
// past maxSpans ranges the two closest are joined (the gap between them counted as
// held); deletions, seals and folds leave it as it is (the pair then holds fewer
// points, still inside it). A summary read from disk has no cover, and its
// [minT, maxT] stands for one. Counts, statistics and digests therefore stay exact: a
// point the cover cannot rule out is checked against the stored points as before.

// maxSpans bounds a cover. Out-of-order batches leave one gap per batch still to
// come, so a handful of concurrent senders needs a handful of ranges; 4 keeps the
// cover at 64 bytes of each cached summary.
const maxSpans = 4

// timeSpan is an inclusive range of timestamps.
type timeSpan struct{ lo, hi int64 }

// timeCover is a pair's cover: n ascending, disjoint spans. n == 0 means unknown (the
// summary's [minT, maxT] stands for it).
type timeCover struct {
	s [maxSpans]timeSpan
	n uint8
}

// coverOf returns the cover of the points summary s describes: its own, or [minT, maxT].
func coverOf(s *summary) timeCover {
	switch {
	case s.count == 0:
		return timeCover{}
	case s.cover.n == 0:
		return timeCover{s: [maxSpans]timeSpan{{s.minT, s.maxT}}, n: 1}
	}
	return s.cover
}

// add returns c with [lo, hi] (lo <= hi) added.
func (c timeCover) add(lo, hi int64) timeCover {
	var buf [maxSpans + 1]timeSpan
	out := buf[:0]
	placed := false
	for _, sp := range c.s[:c.n] {
		switch {
		case sp.hi < lo:
			out = append(out, sp)
		case hi < sp.lo:
			if !placed {
				out, placed = append(out, timeSpan{lo, hi}), true
			}
			out = append(out, sp)
		default: // overlapping: widen the new span
			lo, hi = min(lo, sp.lo), max(hi, sp.hi)
		}
	}
	if !placed { // every span kept lies below it
		out = append(out, timeSpan{lo, hi})
	}
	for len(out) > maxSpans { // join the two closest neighbours
		j := 1
		for i := 2; i < len(out); i++ {
			if gap(out[i-1], out[i]) < gap(out[j-1], out[j]) {
				j = i
			}
		}
		out[j-1].hi = out[j].hi
		out = append(out[:j], out[j+1:]...)
	}
	var r timeCover
	r.n = uint8(copy(r.s[:], out))
	return r
}

// gap returns the time between span a and the later span b, saturating on overflow.
func gap(a, b timeSpan) uint64 { return uint64(b.lo) - uint64(a.hi) }

// meets reports whether any of the ascending timestamps ts may be held by the pair:
// whether one falls in a span of c. An unknown cover (n == 0) meets everything.
func (c *timeCover) meets(ts []int64) bool {
	if c.n == 0 {
		return true
	}
	i := 0
	for _, sp := range c.s[:c.n] {
		for i < len(ts) && ts[i] < sp.lo {
			i++
		}
		if i == len(ts) {
			return false
		}
		if ts[i] <= sp.hi {
			return true
		}
	}
	return false
}
