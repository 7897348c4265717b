package httpapi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/influxql"
)

// A raw subquery with LIMIT or OFFSET whose GROUP BY tags the outer statement does not
// all group by, as InfluxDB 1.x answers it (tsbs' high-load query is one):
//
//	SELECT name, driver, load FROM (SELECT load FROM diagnostics GROUP BY name, driver
//	ORDER BY time DESC LIMIT 1) GROUP BY name
//
// InfluxDB does not keep LIMIT points of each inner group there. Its storage engine
// (tsm1 Engine.createTagSetIterators, where the outer query's dimensions differ from
// the inner grouping) takes, within each shard, the first LIMIT+OFFSET+1 points of each
// stored series (a measurement and all its tags); merges the series of each outer group
// by time (a sorted-merge heap over the series in series-key order, ties left as the
// heap leaves them); and keeps, of that stream, LIMIT points after OFFSET of each run of
// consecutive points with the same inner tags, the count starting again whenever the
// tags change (query.NewLimitIterator). The query layer then applies the same limit
// once more to the shards' streams merged. So an outer group over several inner groups
// holds a point each time the merged stream moves from one inner group to another, and
// an OFFSET drops points twice.
//
// limitedPerSeries answers it so: the stored series' first points come from the inner
// statement grouped by every tag (GROUP BY *) with the per-series limit, one shard group
// (shardGroup) at a time; the merge replays InfluxDB's heap (rawOrder); the limit runs
// as its iterator does. The answer is rows of the inner tags, in the
// stream's order, as the executor's own answer to the inner statement would be.

// maxLimitedShardGroups bounds the shard groups a limited subquery's range is read in,
// one read each.
const maxLimitedShardGroups = 60

// limitsByRuns reports whether InfluxDB limits a subquery's inner statement by runs of
// its stream, not per inner group: LIMIT or OFFSET, and a GROUP BY tag the outer
// statement s does not group by.
func limitsByRuns(inner, s *influxql.SelectStatement) bool {
	if inner.Limit == 0 && inner.Offset == 0 {
		return false
	}
	_, outer := s.Dimensions.Normalize()
	for _, d := range inner.Dimensions {
		if ref, ok := d.Expr.(*influxql.VarRef); ok && !slices.Contains(outer, ref.Val) {
			return true
		}
	}
	return false
}

// innerRows answers the inner statement of a subquery: as any statement, or limited by
// runs where InfluxDB limits it so.
func (h *Handler) innerRows(ctx context.Context, qc *queryCost, inner, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	switch {
	case !limitsByRuns(inner, s):
		return h.execSelect(ctx, qc, inner, db, now)
	case inner.IsRawQuery:
		return h.limitedPerSeries(ctx, qc, inner, s, db, now)
	default:
		return h.limitedWindows(ctx, qc, inner, s, db, now)
	}
}

// limitedPerSeries answers a raw inner statement that limitsByRuns.
func (h *Handler) limitedPerSeries(ctx context.Context, qc *queryCost, inner, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	outerTags, innerTags, err := runTags(inner, s)
	if err != nil {
		return nil, err
	}
	first, last, err := h.limitedSpan(ctx, inner, db, now)
	if err != nil || first > last {
		return nil, err
	}
	asc := inner.TimeAscending()
	g0, g1 := shardGroupOf(first), shardGroupOf(last)
	groups := int((g1-g0)/int64(shardGroup)) + 1
	if groups > maxLimitedShardGroups {
		return nil, unsupported("LIMIT or OFFSET in a subquery whose series the outer GROUP BY merges, over more than %d shard groups of 7 days (InfluxDB 1.x limits each apart): narrow the time range", maxLimitedShardGroups)
	}
	lim := limiter{limit: inner.Limit, offset: inner.Offset}
	streams := map[string][]streamPoint{} // outer group → the stream of its points
	var order []string                    // outer groups in the order first seen
	for i := range groups {
		g := g0 + int64(i)*int64(shardGroup)
		if !asc {
			g = g1 - int64(i)*int64(shardGroup)
		}
		per := inner.Clone()
		per.Limit, per.Offset = inner.Limit+inner.Offset+1, 0
		per.Dimensions = influxql.Dimensions{{Expr: &influxql.Wildcard{}}}
		per.Condition = andTime(per.Condition, g, g+int64(shardGroup))
		rows, err := h.execSelect(ctx, qc, per, db, now)
		if err != nil {
			return nil, err
		}
		byGroup := map[string][]*row{}
		for _, r := range rows {
			r.boxed()
			k := subsetID(r.Name, r.Tags, outerTags)
			if _, ok := streams[k]; !ok {
				streams[k] = nil
				order = append(order, k)
			}
			byGroup[k] = append(byGroup[k], r)
		}
		for k, series := range byGroup {
			merged := mergeSeries(series, asc)
			streams[k] = append(streams[k], lim.apply(merged, innerTags)...)
		}
	}
	// The query layer's limit, over the shard groups' streams one after another.
	var out []*row
	for _, k := range order {
		byTags := map[string]*row{}
		for _, p := range lim.apply(streams[k], innerTags) {
			id := subsetID(p.r.Name, p.r.Tags, innerTags)
			r := byTags[id]
			if r == nil {
				r = &row{Name: p.r.Name, Tags: subsetTags(p.r.Tags, innerTags), Columns: p.r.Columns}
				byTags[id] = r
				out = append(out, r)
			}
			r.Values = append(r.Values, p.r.Values[p.i])
		}
	}
	return out, nil
}

// runTags returns the outer statement's GROUP BY tags and the inner tags InfluxDB's
// limit compares (the inner GROUP BY tags and the outer ones), sorted.
func runTags(inner, s *influxql.SelectStatement) (outerTags, innerTags []string, err error) {
	_, outerTags = s.Dimensions.Normalize()
	innerTags = slices.Clone(outerTags)
	for _, d := range inner.Dimensions {
		switch e := d.Expr.(type) {
		case *influxql.VarRef:
			innerTags = append(innerTags, e.Val)
		case *influxql.Call: // time()
		default:
			return nil, nil, unsupported("GROUP BY %s in a subquery with LIMIT or OFFSET (name the tags)", d)
		}
	}
	slices.Sort(innerTags)
	return outerTags, slices.Compact(innerTags), nil
}

// limitedWindows answers an inner aggregate that limitsByRuns. InfluxDB's stream of
// it (select.go: the call iterator over a merge ordered by the outer group, then the
// window) holds each outer group's windows in the query's order, and within a window
// a point per inner tag set in ascending order of their tags (the reduce's sort); its
// limit (buildFieldIterator's, once) counts runs of equal inner tags there. With one
// inner tag set per outer group that is LIMIT windows of each; with several, a window
// of a tag set is kept unless the stream's point before it is of the same tag set.
func (h *Handler) limitedWindows(ctx context.Context, qc *queryCost, inner, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	if len(inner.Fields) != 1 {
		return nil, unsupported("LIMIT or OFFSET in a subquery of %d aggregates whose series the outer GROUP BY merges (InfluxDB 1.x limits each apart): select one, or GROUP BY the inner query's tags in the outer query too", len(inner.Fields))
	}
	outerTags, innerTags, err := runTags(inner, s)
	if err != nil {
		return nil, err
	}
	whole := inner.Clone()
	whole.Limit, whole.Offset = 0, 0
	rows, err := h.execSelect(ctx, qc, whole, db, now)
	if err != nil {
		return nil, err
	}
	asc := inner.TimeAscending()
	byGroup := map[string][]streamPoint{}
	var order []string
	ids := make(map[*row]string, len(rows)) // each row's inner tags, ordered as InfluxDB's
	for _, r := range rows {
		r.boxed()
		ids[r] = subsetID("", r.Tags, innerTags)
		k := subsetID(r.Name, r.Tags, outerTags)
		if _, ok := byGroup[k]; !ok {
			order = append(order, k)
		}
		for i := range r.Values {
			byGroup[k] = append(byGroup[k], streamPoint{r: r, i: i})
		}
	}
	lim := limiter{limit: inner.Limit, offset: inner.Offset}
	kept := map[*row][][]any{}
	for _, k := range order {
		stream := byGroup[k]
		slices.SortStableFunc(stream, func(a, b streamPoint) int {
			ta, tb := a.r.Values[a.i][0].(tsValue), b.r.Values[b.i][0].(tsValue)
			if ta != tb {
				if (ta < tb) == asc {
					return -1
				}
				return 1
			}
			return strings.Compare(ids[a.r], ids[b.r])
		})
		for _, p := range lim.apply(stream, innerTags) {
			kept[p.r] = append(kept[p.r], p.r.Values[p.i])
		}
	}
	var out []*row
	for _, r := range rows {
		if vals := kept[r]; len(vals) > 0 {
			r.Values = vals
			out = append(out, r)
		}
	}
	return out, nil
}

// limitedSpan bounds the times the inner statement may read: its WHERE clause's range
// within the catalog's bounds of its measurement's series.
func (h *Handler) limitedSpan(ctx context.Context, inner *influxql.SelectStatement, db string, now time.Time) (first, last int64, err error) {
	cond, tr, err := influxql.ConditionExpr(inner.Condition, &influxql.NowValuer{Now: now, Location: inner.Location})
	if err != nil {
		return 0, 0, err
	}
	eq, _, err := splitCondition(cond)
	if err != nil {
		return 0, 0, err
	}
	first, last = influxql.MinTime, influxql.MaxTime
	if !tr.Min.IsZero() {
		first = tr.Min.UnixNano()
	}
	if !tr.Max.IsZero() {
		last = tr.Max.UnixNano()
	}
	if len(inner.Sources) != 1 {
		return 0, 0, unsupported("a subquery with LIMIT or OFFSET over several measurements (query them one by one)")
	}
	m, ok := inner.Sources[0].(*influxql.Measurement)
	if !ok || m.Regex != nil {
		return 0, 0, unsupported("a subquery with LIMIT or OFFSET over FROM %s (name one measurement)", inner.Sources[0])
	}
	if m.Database != "" {
		db = m.Database
	}
	// The series of the WHERE clause's tag equalities; every series of the measurement
	// when they list none (an equality may name a field).
	q := SeriesQuery{Match: pushable(eq), Prefix: db + "/" + measurementEscaper.Replace(m.Name)}
	var infos []SeriesInfo
	if len(q.Match) > 0 {
		if infos, err = h.eng.Series(ctx, q); err != nil {
			return 0, 0, err
		}
	}
	if len(infos) == 0 {
		q.Match = map[string]string{TagDB: db, TagMeasurement: m.Name}
		if infos, err = h.eng.Series(ctx, q); err != nil {
			return 0, 0, err
		}
	}
	lo, hi := int64(influxql.MaxTime), int64(influxql.MinTime)
	for _, in := range infos {
		if in.Tags[TagDB] != db || in.Tags[TagMeasurement] != m.Name {
			continue
		}
		if !in.HasBounds {
			if tr.Min.IsZero() || tr.Max.IsZero() {
				return 0, 0, errors.New("a time range is required (WHERE time >= '2024-01-01T00:00:00Z' AND time <= now()): the catalog holds no time bounds for some series")
			}
			return first, last, nil
		}
		lo, hi = min(lo, in.First), max(hi, in.Last)
	}
	return max(first, lo), min(last, hi), nil
}

// andTime returns cond AND time >= from AND time < to.
func andTime(cond influxql.Expr, from, to int64) influxql.Expr {
	tm := func(op influxql.Token, t int64) influxql.Expr {
		return &influxql.BinaryExpr{Op: op, LHS: &influxql.VarRef{Val: "time"}, RHS: &influxql.TimeLiteral{Val: time.Unix(0, t).UTC()}}
	}
	bounds := &influxql.BinaryExpr{Op: influxql.AND, LHS: tm(influxql.GTE, from), RHS: tm(influxql.LT, to)}
	if cond == nil {
		return bounds
	}
	return &influxql.BinaryExpr{Op: influxql.AND, LHS: &influxql.ParenExpr{Expr: cond}, RHS: bounds}
}

// streamPoint is one point of a merged stream: value row i of row r.
type streamPoint struct {
	r *row
	i int
}

// mergeSeries merges the rows of one outer group's stored series, within one shard
// group, by time as InfluxDB's sorted-merge iterator does (rawOrder).
func mergeSeries(series []*row, asc bool) []streamPoint {
	keys := make(map[*row]string, len(series))
	for _, r := range series {
		keys[r] = influxSeriesKey(r.Name, r.Tags)
	}
	slices.SortFunc(series, func(a, b *row) int { return strings.Compare(keys[a], keys[b]) })
	times := make([][]int64, len(series)) // ascending, as rawOrder takes them
	for s, r := range series {
		times[s] = make([]int64, len(r.Values))
		for i, v := range r.Values {
			times[s][i] = int64(v[0].(tsValue))
		}
		if !asc {
			slices.Reverse(times[s])
		}
	}
	at := func(set, i int32) int { // the row of r.Values holding time times[set][i]
		if asc {
			return int(i)
		}
		return len(series[set].Values) - 1 - int(i)
	}
	aux := func(set, i int32, c int) (string, bool) {
		v, ok := series[set].Values[at(set, i)][c+1].(string)
		return v, ok
	}
	ncols := 0
	if len(series) > 0 {
		ncols = len(series[0].Columns) - 1
	}
	order := rawOrder(times, !asc, ncols, aux)
	if !asc {
		slices.Reverse(order) // rawOrder gives a descending merge reversed
	}
	out := make([]streamPoint, len(order))
	for i, sr := range order {
		out[i] = streamPoint{r: series[sr.set], i: at(sr.set, sr.row)}
	}
	return out
}

// limiter keeps limit points after offset of each run of consecutive points with the
// same tags, as InfluxDB's limit iterator does.
type limiter struct{ limit, offset int }

func (l limiter) apply(stream []streamPoint, tags []string) []streamPoint {
	var out []streamPoint
	prev, n := "", 0
	for i, p := range stream {
		id := subsetID(p.r.Name, p.r.Tags, tags)
		if i == 0 || id != prev {
			prev, n = id, 0
		}
		n++
		if n <= l.offset || (l.limit > 0 && n-l.offset > l.limit) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// subsetID identifies a measurement and the values of tags keys (a missing tag is ""),
// ordered as InfluxDB orders tag sets when keys are sorted.
func subsetID(name string, tags map[string]string, keys []string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(tags[k])
	}
	return b.String()
}

// subsetTags returns the values of keys in tags, a missing one as "".
func subsetTags(tags map[string]string, keys []string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = tags[k]
	}
	return out
}

// influxSeriesKey is InfluxDB's key of a stored series: the measurement and its tags
// sorted by key, escaped as line protocol escapes them.
func influxSeriesKey(name string, tags map[string]string) string {
	pairs := sortedPairs(tags)
	k := LineKey("", name, pairs, "")
	return k[1 : len(k)-1]
}
