package httpapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// execMeasurement answers a SELECT of one measurement: one row (output series) per
// group.
func (h *Handler) execMeasurement(ctx context.Context, qc *queryCost, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	p, err := h.planSelect(ctx, s, db, now)
	if errors.Is(err, errNoFields) {
		return nil, nil
	}
	if err != nil || p.from >= p.to {
		return nil, err
	}
	if p.raw && p.limit > 0 && !p.transforms {
		return h.execLimited(ctx, qc, p) // limit.go
	}
	return h.execPlan(ctx, qc, p)
}

// execPlan answers a planned SELECT of one measurement: a row per group.
func (h *Handler) execPlan(ctx context.Context, qc *queryCost, p *selectPlan) ([]*row, error) {
	byGroup, err := h.execGroups(ctx, qc, p)
	return p.answer(byGroup), err
}

// answer is the rows of the groups (execGroups' answer, nil where a group has none)
// in the answer's order.
func (p *selectPlan) answer(byGroup []*row) []*row {
	rows := slices.DeleteFunc(byGroup, func(r *row) bool { return r == nil })
	if p.desc {
		slices.Reverse(rows) // InfluxDB answers the series in descending order too
	}
	return rows
}

// execGroups answers a planned SELECT of one measurement: the row of each group, in
// the order of p.groups, nil for a group without values.
func (h *Handler) execGroups(ctx context.Context, qc *queryCost, p *selectPlan) ([]*row, error) {
	var err error
	ex := newExecutor(ctx, h, qc, p)
	ex.prefetch() // every series at once: one request per node (readmany.go)
	columns := append([]string{p.timeName}, p.names...)
	rows := make([]*row, len(p.groups))
	for gi, g := range p.groups {
		var r *row
		switch {
		case p.raw && p.tagCols:
			r, err = ex.rawTagged(g)
		case p.raw:
			r, err = ex.raw(g)
		default:
			r, err = ex.aggregate(g)
		}
		if err != nil {
			return nil, err
		}
		if p.transforms && p.raw {
			for _, keys := range g.keys {
				if len(keys) > 1 {
					return nil, unsupported("%s() of raw values over %d series at once (pin the series with WHERE tag = 'v' or GROUP BY their tags)", firstTransform(p.outs), len(keys))
				}
			}
		}
		var plain *row
		if p.lookBack && p.plain {
			// The other columns over the statement's own range, not the look-back's.
			pp := *p
			pp.from, pp.lookBack = p.plainFrom, false
			if plain, err = newExecutor(ctx, h, qc, &pp).aggregate(g); err != nil {
				return nil, err
			}
		}
		if r, err = p.project(r, plain); err != nil {
			return nil, err
		}
		if p.desc {
			r.reverse()
		}
		r = r.slice(min(p.offset, r.len()), r.len())
		if p.limit > 0 && r.len() > p.limit {
			r = r.slice(0, p.limit)
		}
		if r.len() == 0 {
			continue
		}
		r.Name, r.Tags, r.Columns = p.name, g.tags, columns
		rows[gi] = r
	}
	return rows, nil
}

// reverse puts r's values in the opposite order.
func (r *row) reverse() {
	if r.table != nil {
		r.table.reverse()
		return
	}
	for i, j := 0, len(r.Values)-1; i < j; i, j = i+1, j-1 {
		r.Values[i], r.Values[j] = r.Values[j], r.Values[i]
	}
}

// executor reads what a plan needs, each series once.
type executor struct {
	h       *Handler
	ctx     context.Context
	p       *selectPlan
	qc      *queryCost // the query's charges to the node's budgets
	read    int        // points held so far: read, less those a WHERE clause on fields dropped
	points  map[string]series.Points
	windows map[string][]agg.Window
	types   map[string]series.Type

	cond condCache // the WHERE clause's fields as read, and where it holds (fieldcond.go)

	// prefetched holds series read by prefetch (readmany.go), as read: readSeries
	// takes each from here once instead of reading it.
	prefetched map[string]series.Points

	// ranges holds the range of each series of a group with its own (group.ranged,
	// limit.go): it is read over that range, not the plan's.
	ranges map[string][2]int64
}

func newExecutor(ctx context.Context, h *Handler, qc *queryCost, p *selectPlan) *executor {
	ex := &executor{h: h, ctx: ctx, qc: qc, p: p, points: map[string]series.Points{}, windows: map[string][]agg.Window{}, types: map[string]series.Type{}}
	if len(p.given) > 0 {
		ex.prefetched = maps.Clone(p.given)
	}
	for _, g := range p.groups {
		if !g.ranged {
			continue
		}
		if ex.ranges == nil {
			ex.ranges = map[string][2]int64{}
		}
		for _, k := range g.seriesKeys(p.where) {
			ex.ranges[k] = [2]int64{g.from, g.to}
		}
	}
	return ex
}

// rangeOf is the range series k is read over.
func (ex *executor) rangeOf(k string) (from, to int64) {
	if r, ok := ex.ranges[k]; ok {
		return r[0], r[1]
	}
	return ex.p.from, ex.p.to
}

// readKeys returns the points of the series keys, merged by time. Series never
// written are empty.
func (ex *executor) readKeys(keys []string) (series.Points, error) {
	var out series.Points
	for _, k := range keys {
		pts, ok := ex.points[k]
		if !ok {
			var err error
			if pts, err = ex.readSeries(k); err != nil {
				return out, err
			}
			if pts, err = ex.whereFields(k, pts); err != nil {
				return out, err
			}
			if !ex.p.where.names(k) { // else counted whole by readSeries
				if err = ex.hold(pts.Len()); err != nil {
					return out, err
				}
			}
			if err := ex.qc.points(pts.Len()); err != nil {
				return out, err
			}
			ex.points[k] = pts
		}
		if len(keys) == 1 {
			return pts, nil
		}
		if pts.Len() == 0 {
			continue
		}
		if out.Type != series.Unknown && out.Type != pts.Type {
			return out, fmt.Errorf("the series of one field hold different types (%s and %s): query them one by one", out.Type, pts.Type)
		}
		for i := range pts.T {
			out.AppendFrom(&pts, i)
		}
	}
	sortPoints(&out)
	return out, nil
}

// readSeries reads one series over the statement's range. A series of a field the
// WHERE clause names is kept as read, its points counted against the statement's cap,
// so that it is read once though also selected (whereFields).
func (ex *executor) readSeries(k string) (series.Points, error) {
	if pts, ok := ex.cond.points[k]; ok {
		return pts, nil
	}
	pts, ok := ex.prefetched[k]
	if ok {
		delete(ex.prefetched, k)
	} else {
		var err error
		from, to := ex.rangeOf(k)
		pts, err = ex.h.eng.Read(ex.ctx, k, from, to)
		if errors.Is(err, ErrUnknownSeries) {
			err = nil
		}
		if err != nil {
			return pts, err
		}
	}
	ex.h.m.pointsRead.Add(float64(pts.Len()))
	if ex.p.where.names(k) {
		if err := ex.hold(pts.Len()); err != nil {
			return pts, err
		}
		if ex.cond.points == nil {
			ex.cond.points = map[string]series.Points{}
		}
		ex.cond.points[k] = pts
	}
	return pts, nil
}

// hold counts n more points the statement holds against its cap (MaxQueryPoints).
func (ex *executor) hold(n int) error {
	ex.read += n
	if ex.read > ex.h.cfg.MaxQueryPoints {
		return fmt.Errorf("the statement reads more than %d points: narrow the time range or aggregate with GROUP BY time()", ex.h.cfg.MaxQueryPoints)
	}
	return nil
}

// sortPoints sorts merged points by time, keeping the order of equal times.
func sortPoints(p *series.Points) {
	idx := make([]int, p.Len())
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p.T[idx[a]] < p.T[idx[b]] })
	var out series.Points
	for _, i := range idx {
		out.AppendFrom(p, i)
	}
	*p = out
}

func pointValue(p *series.Points, i int) any {
	switch p.Type {
	case series.Float:
		return p.F[i]
	case series.Int:
		return p.I[i]
	case series.String:
		return p.S[i]
	}
	return nil
}

// raw answers a raw SELECT of one group: a row per timestamp, the columns' values
// side by side (null where a field has no point at that time); over several series,
// a row per series and timestamp, in InfluxDB's order (rawOrder).
func (ex *executor) raw(g group) (*row, error) {
	if len(g.sets) > 1 {
		tables, err := ex.setTables(g)
		if err != nil {
			return nil, err
		}
		if t, ok := mergeSets(ex.p.cols, g.sets, tables, ex.p.desc, ex.h.tiesBySet); ok {
			return &row{table: t}, nil
		}
	}
	t, err := ex.rawRows(g.keys)
	return &row{table: t}, err
}

// rawRows reads each column's keys and lines their points up by time.
func (ex *executor) rawRows(keys [][]string) (*rawTable, error) {
	cols := make([]rawColumn, len(ex.p.cols))
	for i := range ex.p.cols {
		pts, err := ex.readKeys(keys[i])
		if err != nil {
			return nil, err
		}
		cols[i].pts = &pts
	}
	if len(cols) == 1 {
		return newRawTable(cols[0].pts.T, cols), nil
	}
	pos := make([]int, len(cols))
	most := 0 // the rows are at least as many as the longest column's points
	for c := range cols {
		most = max(most, cols[c].pts.Len())
	}
	times := make([]int64, 0, most)
	for c := range cols {
		cols[c].at = make([]int32, 0, most)
	}
	for {
		t, any_ := int64(math.MaxInt64), false
		for c := range cols {
			if pos[c] < cols[c].pts.Len() && cols[c].pts.T[pos[c]] <= t {
				t, any_ = cols[c].pts.T[pos[c]], true
			}
		}
		if !any_ {
			return newRawTable(times, cols), nil
		}
		for c := range cols {
			at := int32(-1)
			if pos[c] < cols[c].pts.Len() && cols[c].pts.T[pos[c]] == t {
				at = int32(pos[c])
				pos[c]++
			}
			cols[c].at = append(cols[c].at, at)
		}
		times = append(times, t)
	}
}

// colWindows returns the windows of one column of a group, for median and percentile
// the values of each window sorted, and for mode and integral each window's value (pre).
func (ex *executor) colWindows(c column, keys []string, win windowing) (_ series.Type, _ []agg.Window, sorted [][]valueAt, pre []any, _ error) {
	if c.special != "" && len(keys) > 1 {
		return 0, nil, nil, nil, unsupported("%s() over %d series at once (InfluxDB's answer follows the order it merges their points in; GROUP BY their tags or pin one)", c.special, len(keys))
	}
	if c.fn.Mergeable() {
		typ, ws, ok, err := ex.partialWindows(c, keys, win)
		if err == nil && typ == series.String && c.fn != agg.Count && c.fn != agg.First && c.fn != agg.Last {
			err = unsupported("%s() of field %q, which holds strings", c.fn, c.field)
		}
		if ok || err != nil {
			return typ, ws, nil, nil, err
		}
	}
	pts, err := ex.readKeys(keys)
	if err != nil {
		return pts.Type, nil, nil, nil, err
	}
	if pts.Type == series.String {
		name := c.special
		if name == "" {
			name = c.fn.String()
		}
		return pts.Type, nil, nil, nil, unsupported("%s() of field %q, which holds strings", name, c.field)
	}
	ws := win.windows(&pts, ex.p.from, ex.p.to)
	if c.special != "" {
		return pts.Type, ws, nil, ex.special(c, &pts, ws), nil
	}
	if !c.fn.Mergeable() {
		sorted = make([][]valueAt, len(ws))
		wi := 0
		for i, t := range pts.T {
			if t < ex.p.from || t >= ex.p.to {
				continue
			}
			start, _ := win.window(t)
			for start != ws[wi].Start {
				wi++
			}
			sorted[wi] = append(sorted[wi], valueAt{value(&pts, i), t})
		}
		for _, s := range sorted {
			sort.SliceStable(s, func(a, b int) bool { return s[a].v < s[b].v })
		}
	}
	return pts.Type, ws, sorted, nil, nil
}

// partialWindows answers a column from the replicas' partial aggregates (Engine.
// Aggregate), the windows of its series merged; ok is false when the partials cannot
// answer it: a selector alone without GROUP BY time() reports its point's time, which
// partials stored by older nodes lack.
func (ex *executor) partialWindows(c column, keys []string, win windowing) (typ series.Type, out []agg.Window, ok bool, err error) {
	needT := ex.p.every == 0 && len(ex.p.cols) == 1 && (c.fn == agg.Min || c.fn == agg.Max)
	byStart := map[int64]int{}
	var ends []seriesEnd // without GROUP BY time(): each series' first or last point
	for _, k := range keys {
		ws, ok := ex.windows[k]
		t := ex.types[k]
		if !ok {
			t, ws, err = ex.keyWindows(k, win)
			if errors.Is(err, ErrUnknownSeries) {
				err = nil
			}
			if err != nil {
				return t, nil, false, err
			}
			ex.windows[k], ex.types[k] = ws, t
		}
		if len(ws) == 0 {
			continue
		}
		if typ != series.Unknown && t != typ {
			return typ, nil, false, fmt.Errorf("the series of field %q hold different types (%s and %s): query them one by one", c.field, typ, t)
		}
		typ = t
		if ex.p.every == 0 && (c.fn == agg.First || c.fn == agg.Last) && len(ws) == 1 {
			ends = append(ends, seriesEnd{k, ws[0].Partial})
		}
		for _, w := range ws {
			if needT && !w.HasExtremaT {
				return typ, nil, false, nil
			}
			if i, seen := byStart[w.Start]; seen {
				out[i].Partial = agg.MergeSeries(out[i].Partial, w.Partial)
			} else {
				byStart[w.Start] = len(out)
				out = append(out, w)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	if len(out) == 1 && ambiguousTie(c.fn, &out[0].Partial, ends) {
		return typ, nil, false, unsupported("%s(%s) without GROUP BY time() where three or more series have a point at the chosen time: InfluxDB's pick among them is not the greatest value in every case; GROUP BY time() or a tag, or pin the series", c.fn, c.field)
	}
	return typ, out, true, nil
}

// keyWindows returns the windows of one series over the statement's range: the
// replicas' partial aggregates when the windows are theirs, else cut here from the
// series' points. Each series is windowed alone, so that points of equal times in
// different series merge as InfluxDB's selectors merge them (agg.MergeSeries).
func (ex *executor) keyWindows(key string, win windowing) (series.Type, []agg.Window, error) {
	if win.aligned() && !ex.p.where.filters(key) { // a field condition filters the points first
		t, ws, err := ex.aggregateKey(key, time.Duration(win.every))
		if !errors.Is(err, ErrStringSeries) {
			return t, ws, err
		}
	}
	pts, err := ex.readKeys([]string{key})
	if err != nil {
		return pts.Type, nil, err
	}
	return pts.Type, win.windows(&pts, ex.p.from, ex.p.to), nil
}

// aggregateKey returns the windows of one series over the statement's range. When
// they are more than one answer holds, it asks page by page, in order: pages end on
// window boundaries (agg.PageEnd), so each window comes whole from one page and the
// pages' windows are the range's, and no point is read to this node.
func (ex *executor) aggregateKey(key string, every time.Duration) (series.Type, []agg.Window, error) {
	typ, ws, err := ex.h.eng.Aggregate(ex.ctx, key, ex.p.from, ex.p.to, every)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) {
		if err == nil {
			err = ex.qc.windows(ws)
		}
		return typ, ws, err
	}
	ws = nil
	for lo := ex.p.from; lo < ex.p.to; {
		hi := agg.PageEnd(lo, ex.p.to, int64(every), max(tooLarge.MaxWindows, 1))
		t, page, err := ex.h.eng.Aggregate(ex.ctx, key, lo, hi, every)
		if err == nil {
			err = ex.qc.windows(page)
		}
		if err != nil {
			return t, nil, fmt.Errorf("page [%d, %d) of %s: %w", lo, hi, key, err)
		}
		if len(page) > 0 {
			typ = t
		}
		ws = append(ws, page...)
		lo = hi
	}
	return typ, ws, nil
}

// wholeRange is the window length that puts every point since the epoch in one
// window, for aggregates without GROUP BY time().
const wholeRange = time.Duration(math.MaxInt64)

// aggregate answers an aggregate SELECT of one group.
func (ex *executor) aggregate(g group) (*row, error) {
	vals, err := ex.aggregateValues(g)
	return &row{Values: vals}, err
}

// aggregateValues is aggregate's values, a row per window.
func (ex *executor) aggregateValues(g group) ([][]any, error) {
	p := ex.p
	type colVals struct {
		typ    series.Type
		byWin  map[int64]int // window start → index in ws
		ws     []agg.Window
		sorted [][]valueAt
		pre    []any
	}
	cv := make([]colVals, len(p.cols))
	empty := true
	for i, c := range p.cols {
		typ, ws, sorted, pre, err := ex.colWindows(c, g.keys[i], p.win)
		if err != nil {
			return nil, err
		}
		cv[i] = colVals{typ: typ, ws: ws, sorted: sorted, pre: pre, byWin: make(map[int64]int, len(ws))}
		for j, w := range ws {
			cv[i].byWin[w.Start] = j
		}
		if len(ws) > 0 {
			empty = false
		}
	}
	if empty {
		return nil, nil
	}
	if p.every == 0 {
		r := make([]any, len(p.cols)+1)
		r[0] = tsValue(p.rowTime)
		if !p.hasLower {
			r[0] = tsValue(0) // over all time, InfluxDB shows the epoch
		}
		for i, c := range p.cols {
			if len(cv[i].ws) == 0 {
				if c.fn == agg.Count && len(g.keys[i]) > 0 { // a field the measurement lacks counts null
					r[i+1] = int64(0)
				}
				continue
			}
			var sorted []valueAt
			if cv[i].sorted != nil {
				sorted = cv[i].sorted[0]
			}
			v, t := aggValue(c, &cv[i].ws[0], sorted, cv[i].typ)
			if cv[i].pre != nil {
				v = cv[i].pre[0]
			}
			if c.special == "integral" && cv[i].typ == series.Float {
				r[0] = tsValue(0) // InfluxDB stamps the integral of floats at the epoch
			}
			r[i+1] = v
			if len(p.cols) == 1 && c.fn.Selector() && t != nil {
				r[0] = tsValue(*t)
			}
		}
		return [][]any{r}, nil
	}
	var data []int64
	for i := range cv {
		for _, w := range cv[i].ws {
			data = append(data, w.Start)
		}
	}
	slices.Sort(data)
	data = slices.Compact(data)
	from := p.fillFrom
	if !p.hasLower && len(data) > 0 {
		from = data[0] // without a lower bound, InfluxDB fills from the group's first point's window
	}
	var out [][]any
	for _, start := range p.win.rowTimes(data, from, p.fillTo, p.fill != influxql.NoFill, ex.h.cfg.MaxQueryWindows+2) {
		r := make([]any, len(p.cols)+1)
		r[0] = tsValue(start)
		anyVal := false
		for i, c := range p.cols {
			j, ok := cv[i].byWin[start]
			if !ok {
				continue
			}
			var sorted []valueAt
			if cv[i].sorted != nil {
				sorted = cv[i].sorted[j]
			}
			r[i+1], _ = aggValue(c, &cv[i].ws[j], sorted, cv[i].typ)
			if cv[i].pre != nil {
				r[i+1] = cv[i].pre[j]
			}
			anyVal = true
		}
		if !anyVal && p.fill == influxql.NoFill {
			continue
		}
		out = append(out, r)
	}
	fill(out, p, g)
	return out, nil
}

// fill fills the empty windows of GROUP BY time() as fill() says.
func fill(rows [][]any, p *selectPlan, g group) {
	for i, c := range p.cols {
		col := i + 1
		var prev any
		for r := range rows {
			v := rows[r][col]
			if v != nil {
				prev = v
				continue
			}
			switch p.fill {
			case influxql.NullFill:
				if c.fn == agg.Count && len(g.keys[i]) > 0 {
					rows[r][col] = int64(0)
				}
			case influxql.NumberFill:
				rows[r][col] = p.fillVal
			case influxql.PreviousFill:
				rows[r][col] = prev
			case influxql.LinearFill:
				rows[r][col] = linear(rows, r, col)
			}
		}
	}
}

// linear interpolates row r of a column between its nearest filled neighbours.
func linear(rows [][]any, r, col int) any {
	lo, hi := -1, -1
	for i := r - 1; i >= 0; i-- {
		if rows[i][col] != nil {
			lo = i
			break
		}
	}
	for i := r + 1; i < len(rows); i++ {
		if rows[i][col] != nil {
			hi = i
			break
		}
	}
	if lo < 0 || hi < 0 {
		return nil
	}
	a, b := toFloat(rows[lo][col]), toFloat(rows[hi][col])
	v := a + (b-a)*float64(r-lo)/float64(hi-lo)
	if _, isInt := rows[lo][col].(int64); isInt {
		return int64(v)
	}
	return v
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return math.NaN()
}

// valueAt is a point's value and time, for median and percentile.
type valueAt struct {
	v float64
	t int64
}

// aggValue computes one aggregate of a window, and for a selector the time of the
// point it selected. sorted holds the window's points by value, for median and
// percentile; the partial answers the rest.
func aggValue(c column, w *agg.Window, sorted []valueAt, typ series.Type) (any, *int64) {
	switch c.fn {
	case agg.Median:
		n := len(sorted)
		if n == 0 {
			return nil, nil
		}
		if n%2 == 1 {
			return sorted[n/2].v, nil
		}
		lo, hi := sorted[n/2-1].v, sorted[n/2].v
		return lo + (hi-lo)/2, nil
	case agg.Percentile:
		n := len(sorted)
		i := int(math.Floor(float64(n)*c.arg/100+0.5)) - 1
		if i < 0 || i >= n {
			return nil, nil
		}
		if typ == series.Int {
			return int64(sorted[i].v), &sorted[i].t
		}
		return sorted[i].v, &sorted[i].t
	}
	var v any
	switch r := w.Eval(c.fn); r.Kind {
	case series.Float:
		v = r.F
	case series.Int:
		v = r.I
	case series.String:
		v = r.S
	}
	if t, ok := w.SelectedT(c.fn); ok {
		return v, &t
	}
	return v, nil
}

func value(p *series.Points, i int) float64 {
	if p.Type == series.Int {
		return float64(p.I[i])
	}
	return p.F[i]
}

// seriesEnd is one series' aggregate over the whole range, for first() and last().
type seriesEnd struct {
	key string
	p   agg.Partial
}

// ambiguousTie reports whether first() or last() without GROUP BY time(), merged to m,
// chose among three or more series with a point at the chosen time where InfluxDB 1.x
// may choose otherwise. InfluxDB picks the greater value of two tied series; of more,
// the greater of the first and the last series by key (it answered so for every order
// of values tried), which may not be the greatest: then the answer is refused.
func ambiguousTie(fn agg.Fn, m *agg.Partial, ends []seriesEnd) bool {
	if len(ends) < 3 || m.Type == series.String {
		return false
	}
	var tied []seriesEnd
	for _, e := range ends {
		if e.p.Count > 0 && ((fn == agg.First && e.p.FirstT == m.FirstT) || (fn == agg.Last && e.p.LastT == m.LastT)) {
			tied = append(tied, e)
		}
	}
	if len(tied) < 3 {
		return false
	}
	slices.SortFunc(tied, func(a, b seriesEnd) int { return strings.Compare(a.key, b.key) })
	val := func(p *agg.Partial) float64 {
		switch {
		case fn == agg.First && p.Type == series.Int:
			return float64(p.IFirst)
		case fn == agg.First:
			return p.First
		case p.Type == series.Int:
			return float64(p.ILast)
		}
		return p.Last
	}
	edge := math.Max(val(&tied[0].p), val(&tied[len(tied)-1].p))
	for i := range tied {
		if val(&tied[i].p) > edge {
			return true
		}
	}
	return false
}
