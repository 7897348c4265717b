package httpapi

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// extent is what the replicas' partial aggregates over a plan's range say of one
// group of a raw SELECT with LIMIT (execLimited): where its rows can be.
type extent struct {
	known       bool  // every series of the group answered
	points      int64 // points of its densest selected series
	first, last int64 // its selected series' earliest and latest point, when points > 0
	never       bool  // its field condition can hold at none of its points
	width       int64 // the window the next try reads of it
	// lastFrom is the start of the latest window of statistics its rows may be in,
	// firstTo the end of the earliest: a try reads at least that window.
	lastFrom, firstTo int64
}

// empty reports whether the group has no rows.
func (e *extent) empty() bool { return e.points == 0 || e.never }

// extents bounds the groups idx of p by the partial aggregates of their series (and of
// their field condition's series) over p's range, in windows of whole hours
// (extentWindow): one AggregateMany, one request per node, which the replicas answer
// from each whole quantum's statistics without reading its points. It returns the
// extents by group (known only for those of idx every series of which answered), or
// nil when the engine is no ManyReader.
func (h *Handler) extents(ctx context.Context, qc *queryCost, p *selectPlan, idx []int) ([]extent, error) {
	ext, held := h.gatherExtents(ctx, p, idx)
	return ext, chargeExtents(qc, held)
}

// chargeExtents charges the query the memory of held windows of statistics.
func chargeExtents(qc *queryCost, held int) error {
	if qc == nil {
		return nil
	}
	return qc.hold(int64(held) * windowBytes)
}

// gatherExtents is extents without the charge: it returns the extents and how many
// windows of statistics it held, for the caller to charge.
func (h *Handler) gatherExtents(ctx context.Context, p *selectPlan, idx []int) (_ []extent, held int) {
	mr, ok := h.eng.(ManyReader)
	if !ok {
		return nil, 0
	}
	var keys []string
	seen := map[string]bool{}
	for _, gi := range idx {
		for _, k := range p.groups[gi].seriesKeys(p.where) {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	stats := make(map[string][]agg.Window, len(keys))
	every := extentWindow(p.to - p.from)
	for i, r := range mr.AggregateMany(ctx, keys, p.from, p.to, every) {
		switch {
		case errors.Is(r.Err, ErrUnknownSeries):
			stats[keys[i]] = nil // read as empty (readSeries)
		case r.Err == nil:
			stats[keys[i]] = r.Windows
			held += len(r.Windows)
		}
		// Else (a string series, a failure) the group is read as without extents.
	}
	ext := make([]extent, len(p.groups))
	need := int64(p.offset) + int64(p.limit)
	for _, gi := range idx {
		ext[gi] = p.groups[gi].extent(p.where, stats, need, int64(every))
	}
	return ext, held
}

// extentWindow is the window of the statistics extents asks for over a range span ns
// long: whole hours, so that a quantum of an hour or less (a series of a point every
// 6 s or faster, quanta.Fit) is answered from its statistics, and at most about 64 of
// them.
func extentWindow(span int64) time.Duration {
	const hour = int64(time.Hour)
	w := max(hour, span/64)
	return time.Duration((w + hour - 1) / hour * hour)
}

// seriesKeys returns every series a group reads, each once: its columns' and those of
// its field condition.
func (g *group) seriesKeys(w *fieldCond) []string {
	var out []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, keys := range g.keys {
		for _, k := range keys {
			add(k)
			if set := w.setOf(k); set != nil {
				for _, ck := range set.keys {
					add(ck)
				}
			}
		}
	}
	return out
}

// extent computes a group's extent from its series' windows of statistics (by key,
// ascending; a key missing is unknown), every ns wide; need is OFFSET+LIMIT. Only the
// windows where a selected series has points and the field condition may hold count:
// no row lies in the others.
func (g *group) extent(w *fieldCond, stats map[string][]agg.Window, need, every int64) extent {
	byKey := map[string]map[int64]agg.Partial{}
	var starts []int64
	for _, k := range g.seriesKeys(w) {
		ws, ok := stats[k]
		if !ok {
			return extent{}
		}
		m := make(map[int64]agg.Partial, len(ws))
		for _, win := range ws {
			m[win.Start] = win.Partial
			starts = append(starts, win.Start)
		}
		byKey[k] = m
	}
	selected := 0
	for _, keys := range g.keys {
		selected += len(keys)
	}
	if selected == 0 {
		return extent{} // nothing to bound it by
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	e := extent{known: true, first: math.MaxInt64, last: math.MinInt64}
	hasPoints := false
	for _, s := range starts {
		n, first, last := int64(0), int64(math.MaxInt64), int64(math.MinInt64)
		for _, keys := range g.keys {
			for _, k := range keys {
				if st := byKey[k][s]; st.Count > 0 {
					n = max(n, st.Count)
					first, last = min(first, st.FirstT), max(last, st.LastT)
				}
			}
		}
		if n == 0 {
			continue
		}
		hasPoints = true
		if !g.mayHold(w, byKey, s) {
			continue
		}
		if e.points == 0 {
			e.firstTo = s + min(every, math.MaxInt64-s)
		}
		e.points += n
		e.first, e.last, e.lastFrom = min(e.first, first), max(e.last, last), s
	}
	if e.points == 0 {
		e.never = hasPoints
		return e
	}
	// A window holding need points were they evenly spread, twice over.
	width := float64(e.last-e.first+1) / float64(e.points) * float64(need) * 2
	e.width = int64(min(max(width, 1), math.MaxInt64/2))
	return e
}

// mayHold reports whether the field condition w (nil: none) may hold at some point of
// a group in the window starting at start, by its series' statistics there.
func (g *group) mayHold(w *fieldCond, byKey map[string]map[int64]agg.Partial, start int64) bool {
	if w == nil {
		return true
	}
	for _, s := range g.sets {
		set := w.sets[s.id]
		if set == nil {
			return true
		}
		at := make(map[string]agg.Partial, len(set.keys))
		for _, k := range set.keys {
			if m, ok := byKey[k]; ok {
				at[k] = m[start] // no window: no point there
			}
		}
		if !w.cannotHold(set, at) {
			return true
		}
	}
	return false
}

// cannotHold reports whether a tag set's field condition holds at none of its points,
// as its fields' statistics over the range show: it is false where every field is null,
// and some part it needs compares a field with a number that no value between the
// field's minimum and maximum meets (a field without points is null throughout). Only
// comparisons of a field read as stored with a number are judged; anything else may
// hold.
func (w *fieldCond) cannotHold(set *condSet, stats map[string]agg.Partial) bool {
	if set.cond == nil {
		return false
	}
	null := influxql.ValuerEval{Valuer: influxql.MapValuer{}}
	if null.EvalBool(set.cond) {
		return false // holds where its fields are null
	}
	var never func(e influxql.Expr) bool
	never = func(e influxql.Expr) bool {
		switch e := e.(type) {
		case *influxql.ParenExpr:
			return never(e.Expr)
		case *influxql.BooleanLiteral:
			return !e.Val
		case *influxql.BinaryExpr:
			switch e.Op {
			case influxql.AND:
				return never(e.LHS) || never(e.RHS)
			case influxql.OR:
				return never(e.LHS) && never(e.RHS)
			}
			ref, c, op, ok := fieldVsNumber(e)
			if !ok || ref.Type != influxql.Unknown || w.fields[ref.Val] != influxql.Unknown {
				return false
			}
			k, ok := set.keys[ref.Val]
			if !ok {
				return true // null at every point: the comparison is false
			}
			st, ok := stats[k]
			if !ok {
				return false
			}
			if st.Count == 0 {
				return true
			}
			lo, hi, ok := valueBounds(&st)
			if !ok {
				return false
			}
			switch op {
			case influxql.GT:
				return hi <= c
			case influxql.GTE:
				return hi < c
			case influxql.LT:
				return lo >= c
			case influxql.LTE:
				return lo > c
			case influxql.EQ:
				return c < lo || c > hi
			}
		}
		return false
	}
	return never(set.cond)
}

// exactFloat bounds the integers a float64 holds exactly.
const exactFloat = 1 << 53

// fieldVsNumber splits a comparison of a name with a number (either side) into the
// name, the number and the operator as seen from the name's side.
func fieldVsNumber(e *influxql.BinaryExpr) (ref *influxql.VarRef, c float64, op influxql.Token, ok bool) {
	flip := map[influxql.Token]influxql.Token{influxql.LT: influxql.GT, influxql.LTE: influxql.GTE,
		influxql.GT: influxql.LT, influxql.GTE: influxql.LTE, influxql.EQ: influxql.EQ}
	if _, cmp := flip[e.Op]; !cmp {
		return nil, 0, 0, false
	}
	lhs, rhs, op := e.LHS, e.RHS, e.Op
	if _, isRef := lhs.(*influxql.VarRef); !isRef {
		lhs, rhs, op = rhs, lhs, flip[op]
	}
	ref, ok = lhs.(*influxql.VarRef)
	if !ok {
		return nil, 0, 0, false
	}
	switch n := rhs.(type) {
	case *influxql.NumberLiteral:
		if math.IsNaN(n.Val) {
			return nil, 0, 0, false
		}
		return ref, n.Val, op, true
	case *influxql.IntegerLiteral:
		if n.Val > -exactFloat && n.Val < exactFloat {
			return ref, float64(n.Val), op, true
		}
	}
	return nil, 0, 0, false
}

// valueBounds returns the least and greatest value of a numeric partial.
func valueBounds(st *agg.Partial) (lo, hi float64, ok bool) {
	switch {
	case st.Type == series.Float && !math.IsNaN(st.Min) && !math.IsNaN(st.Max):
		return st.Min, st.Max, true
	case st.Type == series.Int && st.IMin > -exactFloat && st.IMax < exactFloat:
		return float64(st.IMin), float64(st.IMax), true
	}
	return 0, 0, false
}
