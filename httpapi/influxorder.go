package httpapi

import (
	"container/heap"
	"slices"
	"time"
)

// InfluxDB 1.x's order of the rows of a raw SELECT of fields (no tag column) over
// several series, at equal times.
//
// InfluxDB answers such a SELECT by merging one stream of rows per series by time
// alone, in a binary heap (container/heap), shard group by shard group. Rows of equal
// times come out in whatever order the heap's pushes and pops leave them, which
// depends on the order the streams entered the heap: the series' keys, sorted.
// rawOrder replays that merge over the same streams.

// shardGroup is the shard group duration of InfluxDB's autogen retention policy (SHOW
// RETENTION POLICIES answers it); groups start on Mondays 00:00 UTC (time.Truncate).
const shardGroup = 168 * time.Hour

// shardGroupOf returns the start of the shard group time t falls in.
func shardGroupOf(t int64) int64 {
	return time.Unix(0, t).UTC().Truncate(shardGroup).UnixNano()
}

// rawOrder returns the rows of the tag sets (sorted by their series keys; times[s] the
// times of set s's rows, ascending) in InfluxDB's order: ascending time, or descending
// when desc, with InfluxDB's order at equal times. InfluxDB's heap orders rows of equal
// times by their auxiliary fields' values (the fields and tags selected, in the order
// of their names), while both rows hold strings there (tag values, string fields;
// descending when desc), and leaves them as they come at the first that does not; aux
// returns auxiliary field c of row `row` of set `set` when it holds a string.
func rawOrder(times [][]int64, desc bool, ncols int, aux func(set, row int32, c int) (string, bool)) []setRow {
	// Split the rows of each set into the shard groups they fall in.
	type span struct{ lo, hi int } // rows [lo, hi) of a set
	bySG := map[int64][]span{}
	var sgs []int64
	for s, ts := range times {
		for lo := 0; lo < len(ts); {
			sg := shardGroupOf(ts[lo])
			end := sg + int64(shardGroup)
			hi := lo + 1
			for hi < len(ts) && ts[hi] < end {
				hi++
			}
			if _, seen := bySG[sg]; !seen {
				bySG[sg] = make([]span, len(times))
				sgs = append(sgs, sg)
			}
			bySG[sg][s] = span{lo, hi}
			lo = hi
		}
	}
	slices.Sort(sgs)
	if desc {
		slices.Reverse(sgs)
	}
	var out []setRow
	for _, sg := range sgs {
		h := &rowHeap{desc: desc, ncols: ncols, aux: aux}
		spans := bySG[sg]
		for k := range spans {
			s := k
			if desc {
				s = len(spans) - 1 - k // descending, the series enter in reverse
			}
			sp := spans[s]
			if sp.hi <= sp.lo {
				continue
			}
			st := &rowStream{set: int32(s), times: times[s], next: sp.lo, end: sp.hi, step: 1}
			if desc {
				st.next, st.end, st.step = sp.hi-1, sp.lo-1, -1
			}
			h.items = append(h.items, st)
		}
		heap.Init(h)
		for h.Len() > 0 {
			st := heap.Pop(h).(*rowStream)
			out = append(out, setRow{st.times[st.next], st.set, int32(st.next)})
			st.next += st.step
			if st.next != st.end {
				heap.Push(h, st)
			}
		}
	}
	if desc {
		slices.Reverse(out) // the caller shows the rows in reverse for DESC
	}
	return out
}

// rowStream is the rows of one series in one shard group, next to come first.
type rowStream struct {
	set             int32
	times           []int64
	next, end, step int
}

// rowHeap orders streams by their next row as InfluxDB's sorted merge does.
type rowHeap struct {
	items []*rowStream
	desc  bool
	ncols int
	aux   func(set, row int32, c int) (string, bool)
}

func (h *rowHeap) Len() int { return len(h.items) }
func (h *rowHeap) Less(i, j int) bool {
	x, y := h.items[i], h.items[j]
	a, b := x.times[x.next], y.times[y.next]
	if a != b {
		return (a < b) != h.desc
	}
	for c := 0; c < h.ncols; c++ {
		u, ok1 := h.aux(x.set, int32(x.next), c)
		v, ok2 := h.aux(y.set, int32(y.next), c)
		if !ok1 || !ok2 {
			return false
		}
		if u != v {
			return (u < v) != h.desc
		}
	}
	return false
}
func (h *rowHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *rowHeap) Push(x any)    { h.items = append(h.items, x.(*rowStream)) }
func (h *rowHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
