package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/influxql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Subqueries: SELECT … FROM (SELECT …), as InfluxDB 1.x answers them.
//
// The inner statement is answered first, by the same executor as any statement, after
// taking from the outer one what InfluxDB's inner iterators take from it
// (newIteratorOptionsSubstatement in influxdb/query/iterator.go):
//   - the outer WHERE clause's time range bounds the inner one (their intersection);
//   - the outer GROUP BY tags are added to the inner ones, so that the outer query
//     groups by them; the inner result's tags are then the inner GROUP BY tags (the
//     tags of series the inner query does not group by are gone);
//   - an inner aggregate without GROUP BY time() takes the outer query's interval;
//   - the inner statement is ordered as the outer one; an inner ORDER BY time of the
//     other direction is InfluxDB's error;
//   - an inner aggregate's fill(null), the default, is fill(none): the outer query
//     would ignore the nulls.
//
// Its result — a series per inner tag set, a column per selected expression, named as
// the answer names it (its alias) — is then held as an Engine (heldEngine) whose series
// are one per (tag set, column), the column name as the field, and the outer statement
// is answered over that engine, by the same executor: windows, fill, selectors, field
// conditions and tag columns behave as over stored series. A subquery inside the inner
// statement is answered the same way, recursively; the nesting is bounded by the query's
// parentheses (MaxQueryDepth). The values the inner result holds count against the
// statement's MaxQueryPoints.

// subqueryDB is the database the held inner result's series are named in.
const subqueryDB = "subquery"

// execSubquery answers a SELECT whose one source is a subquery.
func (h *Handler) execSubquery(ctx context.Context, qc *queryCost, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	if len(s.Sources) != 1 {
		return nil, unsupported("a subquery beside other sources in FROM (query them one by one)")
	}
	sub, ok := s.Sources[0].(*influxql.SubQuery)
	if !ok {
		return nil, unsupported("FROM %s", s.Sources[0])
	}
	if s.SLimit > 0 || s.SOffset > 0 {
		return nil, unsupported("SLIMIT or SOFFSET over a subquery")
	}
	if s.HasDimensionWildcard() {
		return nil, unsupported("GROUP BY * over a subquery (name the tags)")
	}
	inner, err := innerStatement(s, sub.Statement, now)
	if err != nil {
		return nil, err
	}
	rows, err := h.innerRows(ctx, qc, inner, s, db, now) // sublimit.go
	if err != nil {
		return nil, err
	}
	held, name, err := holdRows(rows, h.cfg.MaxQueryPoints)
	if err != nil || held == nil {
		return nil, err
	}
	outer, err := outerStatement(s, held, now)
	if err != nil {
		return nil, err
	}
	outer.Sources = influxql.Sources{&influxql.Measurement{Database: subqueryDB, Name: name}}
	onlyTags := held.typeTags(outer)
	if onlyTags {
		// InfluxDB answers a row at each point of the subquery: select its column
		// beside the tags, and drop it from the answer.
		if len(rows[0].Columns) != 2 {
			return nil, unsupported("selecting only tags from a subquery of %d columns (select one of its fields too)", len(rows[0].Columns)-1)
		}
		outer.Fields = append(outer.Fields, &influxql.Field{Expr: &influxql.VarRef{Val: rows[0].Columns[1]}})
	}
	over := *h
	over.eng = held
	over.tiesBySet = !inner.IsRawQuery
	m := *h.m
	m.pointsRead = prometheus.NewCounter(prometheus.CounterOpts{Name: "held_points_read"}) // not read from the cluster: not counted
	over.m = &m
	rows, err = over.execSelect(ctx, qc, outer, subqueryDB, now)
	if onlyTags {
		for _, r := range rows {
			r.boxed()
			r.Columns = r.Columns[:len(r.Columns)-1]
			for i := range r.Values {
				r.Values[i] = r.Values[i][:len(r.Values[i])-1]
			}
		}
	}
	return rows, err
}

// typeTags marks the names the outer statement selects that are tags of the held
// answer, not fields, as tags: their values are the series' tag values. It reports
// whether the statement selects nothing but tags.
func (e *heldEngine) typeTags(s *influxql.SelectStatement) (onlyTags bool) {
	fields, tags := map[string]bool{}, map[string]bool{}
	for _, in := range e.infos {
		fields[in.Tags[TagField]] = true
		for k := range in.Tags {
			tags[k] = !strings.HasPrefix(k, "__")
		}
	}
	onlyTags = len(s.Fields) > 0
	for _, f := range s.Fields {
		ref, ok := f.Expr.(*influxql.VarRef)
		if ok && ref.Type == influxql.Unknown && tags[ref.Val] && !fields[ref.Val] {
			ref.Type = influxql.Tag
		}
		onlyTags = onlyTags && ok && ref.Type == influxql.Tag
	}
	return onlyTags
}

// innerStatement returns the inner statement of a subquery as the outer one s shapes it.
func innerStatement(s, in *influxql.SelectStatement, now time.Time) (*influxql.SelectStatement, error) {
	inner := in.Clone()
	_, tr, err := influxql.ConditionExpr(s.Condition, &influxql.NowValuer{Now: now, Location: s.Location})
	if err != nil {
		return nil, err
	}
	bound := func(op influxql.Token, t time.Time) {
		e := &influxql.BinaryExpr{Op: op, LHS: &influxql.VarRef{Val: "time"}, RHS: &influxql.TimeLiteral{Val: t}}
		if inner.Condition == nil {
			inner.Condition = e
			return
		}
		inner.Condition = &influxql.BinaryExpr{Op: influxql.AND, LHS: &influxql.ParenExpr{Expr: inner.Condition}, RHS: e}
	}
	if !tr.Min.IsZero() {
		bound(influxql.GTE, tr.Min)
	}
	if !tr.Max.IsZero() {
		bound(influxql.LTE, tr.Max)
	}
	innerEvery, err := inner.GroupByInterval()
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, d := range inner.Dimensions {
		if ref, ok := d.Expr.(*influxql.VarRef); ok {
			have[ref.Val] = true
		}
	}
	for _, d := range s.Dimensions {
		switch e := d.Expr.(type) {
		case *influxql.VarRef:
			if !have[e.Val] {
				inner.Dimensions = append(inner.Dimensions, &influxql.Dimension{Expr: &influxql.VarRef{Val: e.Val}})
				have[e.Val] = true
			}
		case *influxql.Call: // time(): checked by the outer statement's plan
			if innerEvery == 0 && !inner.IsRawQuery {
				inner.Dimensions = append(inner.Dimensions, &influxql.Dimension{Expr: influxql.CloneExpr(e)})
			}
		}
	}
	if len(inner.SortFields) > 0 && inner.TimeAscending() != s.TimeAscending() {
		return nil, errors.New("subqueries must be ordered in the same direction as the query itself") // InfluxDB's words
	}
	inner.SortFields = influxql.SortFields{{Name: "time", Ascending: s.TimeAscending()}}
	if !inner.IsRawQuery && inner.Fill == influxql.NullFill {
		inner.Fill = influxql.NoFill
	}
	return inner, nil
}

// outerStatement returns the outer statement of a subquery to be answered over its
// inner statement's answer, held: its time range bounded below by the answer's first
// time, not by its own lower bound, which InfluxDB applies to the inner statement only
// (an inner window starting before it is answered, stamped with its start).
func outerStatement(s *influxql.SelectStatement, held *heldEngine, now time.Time) (*influxql.SelectStatement, error) {
	outer := s.Clone()
	cond, tr, err := influxql.ConditionExpr(s.Condition, &influxql.NowValuer{Now: now, Location: s.Location})
	if err != nil || tr.Min.IsZero() {
		return outer, err
	}
	first := held.first()
	if first >= tr.Min.UnixNano() {
		return outer, nil
	}
	every, err := s.GroupByInterval()
	if err != nil {
		return nil, err
	}
	if every == 0 && !s.IsRawQuery {
		return nil, unsupported("an aggregate without GROUP BY time() over a subquery whose answer starts before the outer WHERE clause's lower time bound (InfluxDB 1.x answers it with nothing): widen the outer time range or GROUP BY time()")
	}
	if every > 0 {
		off, err := s.GroupByOffset()
		if err != nil {
			return nil, err
		}
		win := windowing{every: int64(every), offset: int64(off), loc: s.Location}
		answerStart, _ := win.window(first)
		if rangeStart, _ := win.window(tr.Min.UnixNano()); answerStart < rangeStart {
			return nil, unsupported("GROUP BY time(%v) over a subquery whose answer starts in a window before the outer WHERE clause's lower time bound: align the outer range to the inner windows", every)
		}
	}
	lower := &influxql.BinaryExpr{Op: influxql.GTE, LHS: &influxql.VarRef{Val: "time"}, RHS: &influxql.TimeLiteral{Val: time.Unix(0, first).UTC()}}
	outer.Condition = lower
	if cond != nil {
		outer.Condition = &influxql.BinaryExpr{Op: influxql.AND, LHS: &influxql.ParenExpr{Expr: cond}, RHS: lower}
	}
	if !tr.Max.IsZero() {
		outer.Condition = &influxql.BinaryExpr{Op: influxql.AND, LHS: outer.Condition,
			RHS: &influxql.BinaryExpr{Op: influxql.LTE, LHS: &influxql.VarRef{Val: "time"}, RHS: &influxql.TimeLiteral{Val: tr.Max}}}
	}
	return outer, nil
}

// holdRows returns the rows of an inner statement's answer as an Engine, and the
// measurement they are of; nil when they are none. They may hold at most max values.
func holdRows(rows []*row, max int) (*heldEngine, string, error) {
	if len(rows) == 0 {
		return nil, "", nil
	}
	name := rows[0].Name
	e := &heldEngine{points: map[string]series.Points{}}
	held := 0
	for _, r := range rows {
		if r.Name != name {
			return nil, "", unsupported("a subquery over several measurements (%s and %s): query them one by one", name, r.Name)
		}
		vals := r.boxed()
		tags := sortedPairs(r.Tags)
		for c := 1; c < len(r.Columns); c++ {
			pts, err := columnPoints(vals, c)
			if err != nil {
				return nil, "", fmt.Errorf("column %q of the subquery: %w", r.Columns[c], err)
			}
			if pts.Len() == 0 {
				continue
			}
			if held += pts.Len(); held > max {
				return nil, "", fmt.Errorf("the subquery's answer holds more than %d values (MaxQueryPoints): narrow its time range or widen its GROUP BY time() interval", max)
			}
			key := LineKey(subqueryDB, name, tags, r.Columns[c])
			e.points[key] = pts
			e.infos = append(e.infos, SeriesInfo{Key: key, Type: pts.Type, Tags: lineTags(subqueryDB, name, tags, r.Columns[c]),
				First: pts.T[0], Last: pts.T[pts.Len()-1], HasBounds: true})
		}
	}
	return e, name, nil
}

// columnPoints returns the non-null values of column c of an answer's rows as points,
// sorted by time: floats where the column mixes integers and floats.
func columnPoints(vals [][]any, c int) (series.Points, error) {
	var pts series.Points
	floats := false
	for _, v := range vals {
		switch x := v[c].(type) {
		case nil, int64:
		case float64:
			floats = true
		case string:
			pts.Type = series.String
		default:
			return pts, unsupported("values of type %T in a subquery's answer", x)
		}
	}
	for _, v := range vals {
		t, ok := v[0].(tsValue)
		if !ok {
			return pts, fmt.Errorf("row time %v (%T) is no timestamp", v[0], v[0])
		}
		switch x := v[c].(type) {
		case int64:
			if pts.Type == series.String {
				return pts, unsupported("a subquery column of strings and numbers")
			}
			if floats {
				pts.AppendFloat(int64(t), float64(x))
			} else {
				pts.AppendInt(int64(t), x)
			}
		case float64:
			if pts.Type == series.String {
				return pts, unsupported("a subquery column of strings and numbers")
			}
			pts.AppendFloat(int64(t), x)
		case string:
			pts.AppendString(int64(t), x)
		}
	}
	sortPoints(&pts)
	return pts, nil
}

// heldEngine is the answer of a subquery's inner statement, held in memory, as the
// Engine its outer statement is answered over: read-only, with a catalog.
type heldEngine struct {
	infos  []SeriesInfo
	points map[string]series.Points // by key, sorted by time
}

// first returns the earliest time of the held points.
func (e *heldEngine) first() int64 {
	first := int64(math.MaxInt64)
	for _, in := range e.infos {
		first = min(first, in.First)
	}
	return first
}

var errHeldReadOnly = errors.New("a subquery's answer cannot be written to")

func (e *heldEngine) Write(context.Context, string, map[string]string, series.Points) (int, error) {
	return 0, errHeldReadOnly
}

func (e *heldEngine) Read(_ context.Context, key string, from, to int64) (series.Points, error) {
	pts, ok := e.points[key]
	if !ok {
		return series.Points{}, fmt.Errorf("%q: %w", key, ErrUnknownSeries)
	}
	in := pts.Trim(from, to)
	var out series.Points
	for i := range in.T {
		out.AppendFrom(&in, i) // a copy: the executor may sort or filter what it reads
	}
	out.Type = pts.Type
	return out, nil
}

func (e *heldEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error) {
	pts, err := e.Read(ctx, key, from, to)
	if err != nil {
		return pts.Type, nil, err
	}
	return pts.Type, windowing{every: int64(every)}.windows(&pts, from, to), nil
}

func (e *heldEngine) Series(_ context.Context, q SeriesQuery) ([]SeriesInfo, error) {
	var out []SeriesInfo
	for _, in := range e.infos {
		if !strings.HasPrefix(in.Key, q.Prefix) || len(q.Fields) > 0 && !slices.Contains(q.Fields, in.Tags[TagField]) {
			continue
		}
		ok := true
		for k, v := range q.Match {
			ok = ok && in.Tags[k] == v
		}
		if ok {
			out = append(out, in)
		}
	}
	return slices.Clip(out), nil
}

func (e *heldEngine) Ready() error                         { return nil }
func (e *heldEngine) Stats(context.Context) (Stats, error) { return Stats{}, nil }
