package httpapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/influxdata/influxql"
)

// The SHOW … CARDINALITY statements count what their SHOW counterparts list, from the
// same catalog listing (show.go), exactly. As InfluxDB 1.x answers them:
//   - SHOW SERIES CARDINALITY and SHOW MEASUREMENT CARDINALITY without EXACT, FROM,
//     WHERE or OFFSET answer one row, "cardinality estimation", of the whole database
//     (0 for a database without series). tsdht's estimate is the exact count.
//   - Otherwise each answers, per measurement (SHOW MEASUREMENT …: once), a "count"
//     row of the series, tag keys, values of the tag keys WITH KEY selects (each value
//     once), or field keys it selects; a measurement without any has no row; a
//     database without series is "database not found".
//   - OFFSET 1 or more leaves no row (each count is a series of one row); LIMIT
//     changes nothing. GROUP BY is refused.

// execCardinality answers a SHOW … CARDINALITY statement.
func (h *Handler) execCardinality(ctx context.Context, stmt influxql.Statement, db string) (rows []*row, err error) {
	var (
		q     = showQuery{what: stmt.String()}
		exact bool
		dims  influxql.Dimensions
		count func(*showSet, string) int // of one measurement
		want  func(string) bool          // the tag keys of SHOW TAG VALUES
	)
	switch s := stmt.(type) {
	case *influxql.ShowSeriesCardinalityStatement:
		q.db, q.sources, q.cond, q.offset, exact, dims = s.Database, s.Sources, s.Condition, s.Offset, s.Exact, s.Dimensions
		count = func(set *showSet, m string) int { return len(seriesKeysOf(set.byMeas[m])) }
	case *influxql.ShowMeasurementCardinalityStatement:
		q.db, q.sources, q.cond, q.offset, exact, dims = s.Database, s.Sources, s.Condition, s.Offset, s.Exact, s.Dimensions
	case *influxql.ShowTagKeyCardinalityStatement:
		q.db, q.sources, q.cond, q.offset, exact, dims = s.Database, s.Sources, s.Condition, s.Offset, true, s.Dimensions
		count = func(set *showSet, m string) int { return len(set.tagKeys(m)) }
	case *influxql.ShowTagValuesCardinalityStatement:
		q.db, q.sources, q.cond, q.offset, exact, dims = s.Database, s.Sources, s.Condition, s.Offset, true, s.Dimensions
		var err error
		if want, err = tagKeyFilter(s.Op, s.TagKeyExpr); err != nil {
			return nil, err
		}
		count = func(set *showSet, m string) int {
			values := map[string]bool{}
			for _, p := range set.values(m, want) {
				values[p[1]] = true
			}
			return len(values)
		}
	case *influxql.ShowFieldKeyCardinalityStatement:
		q.db, q.sources, q.offset, exact, dims = s.Database, s.Sources, s.Offset, true, s.Dimensions
	default:
		return nil, fmt.Errorf("%s is not a SHOW … CARDINALITY statement", stmt)
	}
	if len(dims) > 0 {
		return nil, unsupported("GROUP BY in %s: count without it, or list with the SHOW statement and group the list", q.what)
	}
	if q.db == "" {
		q.db = db
	}
	if _, hadTime, _ := withoutTime(q.cond); hadTime {
		return nil, fmt.Errorf("%s doesn't support time in WHERE clause", strings.SplitN(q.what, " WHERE", 2)[0])
	}
	estimate := !exact && len(q.sources) == 0 && q.cond == nil && q.offset == 0
	q.noneIfMissing = estimate
	if _, fields := stmt.(*influxql.ShowFieldKeyCardinalityStatement); fields {
		fs, err := h.showFields(ctx, q)
		if err != nil || q.offset > 0 {
			return nil, err
		}
		for _, m := range sortedKeys(fs) {
			if n := len(fs[m]); n > 0 {
				rows = append(rows, countRow(m, "count", n))
			}
		}
		return rows, nil
	}
	var set *showSet
	switch stmt.(type) {
	case *influxql.ShowMeasurementCardinalityStatement, *influxql.ShowTagKeyCardinalityStatement:
		// Measurements and tag keys from the database's shape, when it answers one.
		if set, err = h.showShapeKeys(ctx, q); err != nil {
			return nil, err
		}
	case *influxql.ShowTagValuesCardinalityStatement:
		if set, err = h.showShapeValues(ctx, q, want); err != nil {
			return nil, err
		}
	}
	if set == nil {
		if set, err = h.showSelect(ctx, q); err != nil {
			return nil, err
		}
	}
	if q.offset > 0 {
		return nil, nil
	}
	if count == nil { // measurements
		switch n := len(set.measurements); {
		case estimate:
			return []*row{countRow("", "cardinality estimation", n)}, nil
		case n > 0:
			return []*row{countRow("", "count", n)}, nil
		}
		return nil, nil
	}
	if estimate {
		n := 0
		for _, m := range set.measurements {
			n += count(set, m)
		}
		return []*row{countRow("", "cardinality estimation", n)}, nil
	}
	for _, m := range set.measurements {
		if n := count(set, m); n > 0 {
			rows = append(rows, countRow(m, "count", n))
		}
	}
	return rows, nil
}

// countRow is a series of one row: n in column col.
func countRow(name, col string, n int) *row {
	return &row{Name: name, Columns: []string{col}, Values: [][]any{{n}}}
}
