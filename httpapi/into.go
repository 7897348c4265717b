package httpapi

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/series"
)

// SELECT … INTO, as InfluxDB 1.x answers it (coordinator.StatementExecutor.writeInto):
// the statement's answer is written back, a point per row of values — to the target
// measurement (INTO m, INTO db..m, INTO "db"."rp"."m"), or to the row's own
// measurement (INTO db..:MEASUREMENT) — in the target's database (the query's when the
// target names none; a database is made by writing to it, as with /write, where
// InfluxDB wants it created first). The row's GROUP BY tags are the point's tags (an empty one is
// left out, as line protocol has none); every other column is a field, selected tags
// included, a null left out; a row whose columns are all null writes nothing. The
// answer is the count: one series "result", columns time and written, at the epoch.
//
// The points go through the write path's checks: the engine's budget of new series,
// the measurement's field types (a conflict fails the statement, naming the field),
// and the cluster's write quorum. The answer written back is bounded as any answer
// (MaxQueryPoints). Asked by GET, the answer carries InfluxDB's warning that a write in
// a read-only request is deprecated.

// message is a result's message, as InfluxDB's (query.Message).
type message struct {
	Level string `json:"level"`
	Text  string `json:"text"`
}

// execInto answers SELECT … INTO. readOnly is true for a GET request.
func (h *Handler) execInto(ctx context.Context, qc *queryCost, s *influxql.SelectStatement, db string, now time.Time, readOnly bool) ([]*row, []message, error) {
	target := s.Target.Measurement
	tdb := target.Database
	if tdb == "" {
		tdb = db
	}
	if tdb == "" {
		return nil, nil, errDatabaseRequired
	}
	if strings.ContainsAny(tdb, "/#") {
		return nil, nil, fmt.Errorf("database name %q: '/' and '#' are not allowed in a database name (they separate the parts of a series key)", tdb)
	}
	sel := s.Clone()
	sel.Target = nil
	rows, err := h.execSelect(ctx, qc, sel, db, now)
	if err != nil {
		return nil, nil, err
	}
	batches, written, err := intoBatches(tdb, target.Name, rows)
	if err != nil {
		return nil, nil, err
	}
	if len(batches) > 0 {
		if err := h.writeInto(ctx, batches); err != nil {
			return nil, nil, err
		}
	}
	var msgs []message
	if readOnly {
		msgs = []message{{Level: "warning", Text: fmt.Sprintf("deprecated use of '%s' in a read only context, please use a POST request instead", normalized(s, db))}}
	}
	return []*row{{Name: "result", Columns: []string{"time", "written"}, Values: [][]any{{tsValue(0), int64(written)}}}}, msgs, nil
}

// intoBatches returns the points of an answer's rows, a batch per series, to write to
// database db, measurement name (each row's own when ""), and how many points (rows
// of values) they are.
func intoBatches(db, name string, rows []*row) ([]*seriesBatch, int, error) {
	byKey := map[string]*seriesBatch{}
	var batches []*seriesBatch
	written := 0
	for _, r := range rows {
		vals := r.boxed()
		m := name
		if m == "" {
			m = r.Name
		}
		var tags []tagPair
		for _, p := range sortedPairs(r.Tags) {
			if p.v != "" && !strings.HasPrefix(p.k, "__") {
				tags = append(tags, p)
			}
		}
		for _, v := range vals {
			t, ok := v[0].(tsValue)
			if !ok {
				return nil, 0, fmt.Errorf("row time %v (%T) is no timestamp", v[0], v[0])
			}
			wrote := false
			for c := 1; c < len(v) && c < len(r.Columns); c++ {
				if v[c] == nil {
					continue
				}
				if f, ok := v[c].(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
					continue // InfluxDB cannot store these either
				}
				field := r.Columns[c]
				key := LineKey(db, m, tags, field)
				b := byKey[key]
				if b == nil {
					b = &seriesBatch{key: key, tags: lineTags(db, m, tags, field), desc: fmt.Sprintf("field %q on measurement %q", field, m)}
					byKey[key] = b
					batches = append(batches, b)
				}
				if err := appendAnswerValue(&b.pts, int64(t), v[c]); err != nil {
					return nil, 0, fmt.Errorf("field type conflict: input %s %w", b.desc, err)
				}
				wrote = true
			}
			if wrote {
				written++
			}
		}
	}
	for _, b := range batches {
		keepLast(&b.pts)
	}
	return batches, written, nil
}

// keepLast sorts pts by time and keeps, of points of equal times, the last: a point
// overwrites an earlier one of its series and time, as in InfluxDB (its cache keeps
// the last value written at a time).
func keepLast(pts *series.Points) {
	sortPoints(pts) // stable
	var out series.Points
	for i := 0; i < pts.Len(); i++ {
		if i+1 < pts.Len() && pts.T[i+1] == pts.T[i] {
			continue
		}
		out.AppendFrom(pts, i)
	}
	*pts = out
}

// normalized returns s as InfluxDB shows it in messages: every measurement with its
// database (db where it names none) and retention policy (autogen, the only one).
func normalized(s *influxql.SelectStatement, db string) string {
	n := s.Clone()
	influxql.WalkFunc(n, func(node influxql.Node) {
		if m, ok := node.(*influxql.Measurement); ok {
			if m.Database == "" {
				m.Database = db
			}
			if m.RetentionPolicy == "" {
				m.RetentionPolicy = "autogen"
			}
		}
	})
	return n.String()
}

// appendAnswerValue appends value v of an answer at time t to pts, of pts' type.
func appendAnswerValue(pts *series.Points, t int64, v any) error {
	want := series.Unknown
	switch v.(type) {
	case float64:
		want = series.Float
	case int64:
		want = series.Int
	case string:
		want = series.String
	default:
		return unsupported("writing values of type %T with SELECT … INTO", v)
	}
	if pts.Type != series.Unknown && pts.Type != want {
		return fmt.Errorf("is type %s, already exists as type %s in this query's answer", influxType(want), influxType(pts.Type))
	}
	switch x := v.(type) {
	case float64:
		pts.AppendFloat(t, x)
	case int64:
		pts.AppendInt(t, x)
	case string:
		pts.AppendString(t, x)
	}
	return nil
}

// writeInto stores the batches of a SELECT … INTO through the write path's checks; any
// point not stored fails the statement, saying what was stored.
func (h *Handler) writeInto(ctx context.Context, batches []*seriesBatch) error {
	if err := h.admitErr(batches); err != nil {
		h.m.refused.WithLabelValues("new_series").Inc()
		return err
	}
	batches, conflicts, why, err := h.checkFieldTypes(ctx, batches)
	if err != nil {
		return fmt.Errorf("%w: nothing was stored; retry the query", err)
	}
	out := h.store(ctx, batches)
	h.m.pointsWritten.WithLabelValues("influx").Add(float64(out.stored))
	h.m.pointsDropped.WithLabelValues("influx").Add(float64(out.dropped + conflicts))
	switch {
	case out.fatal != nil:
		return fmt.Errorf("write failed after %d points were acknowledged at write quorum (running the query again is harmless): %w", out.stored, out.fatal)
	case conflicts > 0:
		return fmt.Errorf("partial write: %s dropped=%d", why, conflicts+out.dropped)
	case out.dropped > 0:
		return fmt.Errorf("partial write: %s dropped=%d", out.reason, out.dropped)
	}
	return nil
}
