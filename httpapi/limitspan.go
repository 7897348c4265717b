package httpapi

import (
	"context"
	"errors"
	"math"

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
}

// empty reports whether the group has no rows.
func (e *extent) empty() bool { return e.points == 0 || e.never }

// extents bounds the groups idx of p by the partial aggregates of their series (and of
// their field condition's series) over p's range: one AggregateMany, one request per
// node, which the replicas answer from each whole quantum's statistics without reading
// its points. It returns the extents by group (known only for those of idx every
// series of which answered), or nil when the engine is no ManyReader.
func (h *Handler) extents(ctx context.Context, qc *queryCost, p *selectPlan, idx []int) ([]extent, error) {
	mr, ok := h.eng.(ManyReader)
	if !ok {
		return nil, nil
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
	stats := make(map[string]agg.Partial, len(keys))
	for i, r := range mr.AggregateMany(ctx, keys, p.from, p.to, wholeRange) {
		switch {
		case errors.Is(r.Err, ErrUnknownSeries) || r.Err == nil && len(r.Windows) == 0:
			stats[keys[i]] = agg.Partial{} // read as empty (readSeries)
		case r.Err == nil && len(r.Windows) == 1:
			stats[keys[i]] = r.Windows[0].Partial
		}
		// Else (a string series, a failure, a range across the epoch) the group is
		// read as without extents.
	}
	if qc != nil {
		if err := qc.hold(int64(len(keys)) * windowBytes); err != nil {
			return nil, err
		}
	}
	ext := make([]extent, len(p.groups))
	need := int64(p.offset) + int64(p.limit)
	for _, gi := range idx {
		ext[gi] = p.groups[gi].extent(p.where, stats, need)
	}
	return ext, nil
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

// extent computes a group's extent from its series' statistics; need is OFFSET+LIMIT.
func (g *group) extent(w *fieldCond, stats map[string]agg.Partial, need int64) extent {
	e := extent{known: true, first: math.MaxInt64, last: math.MinInt64}
	selected := 0
	for _, keys := range g.keys {
		for _, k := range keys {
			selected++
			st, ok := stats[k]
			if !ok {
				return extent{}
			}
			if st.Count > 0 {
				e.points = max(e.points, st.Count)
				e.first, e.last = min(e.first, st.FirstT), max(e.last, st.LastT)
			}
		}
	}
	if selected == 0 {
		return extent{} // nothing to bound it by
	}
	if e.points == 0 {
		return e
	}
	if w != nil {
		e.never = len(g.sets) > 0
		for _, s := range g.sets {
			set := w.sets[s.id]
			if set == nil || !w.cannotHold(set, stats) {
				e.never = false
				break
			}
		}
	}
	// A window holding need points were they evenly spread, twice over.
	width := float64(e.last-e.first+1) / float64(e.points) * float64(need) * 2
	e.width = int64(min(max(width, 1), math.MaxInt64/2))
	return e
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
