package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/series"
)

// SELECT *, SELECT *::field, SELECT /regex/, mean(*) and GROUP BY * are expanded by
// influxql's own RewriteFields, as InfluxDB does, from the measurement's fields and tag
// keys as the catalog lists them: fieldMapper answers its questions.

// fieldMapper is influxql.FieldMapper over the catalog's series of one database.
type fieldMapper struct {
	ctx context.Context
	h   *Handler
	eng Engine
	db  string

	// from and to bound the statement's times: as InfluxDB lists the fields of the
	// shard groups a range meets, a field none of whose series was written in those
	// weeks (by the catalog's bounds) is left out.
	from, to int64

	// listAll says that the statement's plan lists every series of the measurement
	// (expandListing): the fields are taken from that listing, not from the shape.
	listAll bool

	meas   string
	fields map[string]influxql.DataType
	dims   map[string]struct{}
	infos  []SeriesInfo // meas' series as listed
}

// listed returns the series of measurement meas of database db the mapper listed, when
// it listed them.
func (f *fieldMapper) listed(db, meas string) ([]SeriesInfo, bool) {
	if f == nil || f.fields == nil || f.meas != db+"\x00"+meas {
		return nil, false
	}
	return f.infos, true
}

// inShardGroups reports whether a series' bounds meet the shard groups [from, to) meets.
func (f *fieldMapper) inShardGroups(in SeriesInfo) bool {
	if !in.HasBounds {
		return true
	}
	lo, hi := shardGroupRange(f.from, f.to) // shape.go
	return in.Last >= lo && in.First < hi
}

// FieldDimensions implements influxql.FieldMapper: the fields of measurement m (their
// types as stored: booleans are integers here) and its tag keys.
func (f *fieldMapper) FieldDimensions(m *influxql.Measurement) (map[string]influxql.DataType, map[string]struct{}, error) {
	if m.Regex != nil || m.Name == "" {
		return nil, nil, fmt.Errorf("FROM %s: %w (a regular expression as the source)", m, ErrNeedsCatalog)
	}
	db := f.db
	if m.Database != "" {
		db = m.Database
	}
	if f.fields != nil && f.meas == db+"\x00"+m.Name {
		return copyTypes(f.fields), copySet(f.dims), nil
	}
	// The measurement's shape, when the catalog answers one: its fields without its
	// series. Unless the plan lists every series of it anyway (listAll).
	if !f.listAll {
		sh, ok, err := f.h.shape(f.ctx, db, m.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("expanding the fields of %s: %w", m.Name, err)
		}
		if ok {
			fields, dims := shapeDimensions(sh, m.Name, f.from, f.to)
			f.meas, f.fields, f.dims, f.infos = db+"\x00"+m.Name, fields, dims, nil
			return copyTypes(fields), copySet(dims), nil
		}
	}
	infos, err := f.eng.Series(f.ctx, SeriesQuery{
		Match:  map[string]string{TagDB: db, TagMeasurement: m.Name},
		Prefix: db + "/" + measurementEscaper.Replace(m.Name),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("expanding the fields of %s: %w", m.Name, err)
	}
	fields := map[string]influxql.DataType{}
	dims := map[string]struct{}{}
	for _, in := range infos {
		if in.Tags[TagDB] != db || in.Tags[TagMeasurement] != m.Name {
			continue
		}
		if _, seen := fields[in.Tags[TagField]]; !seen && f.inShardGroups(in) {
			fields[in.Tags[TagField]] = influxType2(in.Type)
		}
		for k := range in.Tags {
			if !strings.HasPrefix(k, "__") {
				dims[k] = struct{}{}
			}
		}
	}
	f.meas, f.fields, f.dims, f.infos = db+"\x00"+m.Name, fields, dims, infos
	return copyTypes(fields), copySet(dims), nil
}

// MapType implements influxql.TypeMapper.
func (f *fieldMapper) MapType(m *influxql.Measurement, field string) influxql.DataType {
	fields, dims, err := f.FieldDimensions(m)
	if err != nil {
		return influxql.Unknown
	}
	if t, ok := fields[field]; ok {
		return t
	}
	if _, ok := dims[field]; ok {
		return influxql.Tag
	}
	return influxql.Unknown
}

func influxType2(t series.Type) influxql.DataType {
	switch t {
	case series.Float:
		return influxql.Float
	case series.Int:
		return influxql.Integer
	case series.String:
		return influxql.String
	}
	return influxql.Unknown
}

func copyTypes(m map[string]influxql.DataType) map[string]influxql.DataType {
	out := make(map[string]influxql.DataType, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copySet(m map[string]struct{}) map[string]struct{} {
	out := make(map[string]struct{}, len(m))
	for k := range m {
		out[k] = struct{}{}
	}
	return out
}

// errNoFields is expandWildcards' answer for wildcards that name no field: the
// statement has no series to answer.
var errNoFields = errors.New("the wildcards name no field")

// expandWildcards rewrites a SELECT's wildcards and regular expressions into the
// fields and tags they name; a statement without any is returned as it is.
func (h *Handler) expandWildcards(ctx context.Context, s *influxql.SelectStatement, db string, now time.Time) (*influxql.SelectStatement, error) {
	out, _, err := h.expandListing(ctx, s, db, now, false)
	return out, err
}

// expandListing is expandWildcards, and the field mapper that listed the measurement's
// series for it (nil without wildcards), whose listing the statement's plan reuses
// (reuse). A statement whose condition pins no tag lists every series of the
// measurement anyway: its wildcards are expanded from that listing, read once. One
// that pins a tag (hostname = 'host_1') lists only that tag's series, and its wildcards
// are expanded from the measurement's shape.
func (h *Handler) expandListing(ctx context.Context, s *influxql.SelectStatement, db string, now time.Time, reuse bool) (*influxql.SelectStatement, *fieldMapper, error) {
	if !s.HasFieldWildcard() && !s.HasDimensionWildcard() {
		return s, nil, nil
	}
	cond, tr, err := influxql.ConditionExpr(s.Condition, &influxql.NowValuer{Now: now})
	if err != nil {
		return nil, nil, err
	}
	fm := &fieldMapper{ctx: ctx, h: h, eng: h.eng, db: db, from: math.MinInt64, to: math.MaxInt64}
	if eq, _, err := splitCondition(cond); reuse && err == nil && len(eq) == 0 {
		fm.listAll = true
	}
	if !tr.Min.IsZero() {
		fm.from = tr.Min.UnixNano()
	}
	if !tr.Max.IsZero() {
		fm.to = tr.Max.UnixNano() + 1
	}
	out, err := s.RewriteFields(fm)
	if err != nil {
		return nil, nil, err
	}
	if len(out.Fields) == 0 {
		if err := h.databaseExists(ctx, db); err != nil {
			return nil, nil, err
		}
		return nil, nil, errNoFields // InfluxDB answers no series
	}
	return out, fm, nil
}

// tagSet is the series of a group that share one full tag set: for each column, the
// keys of the series holding its field. Raw SELECTs with tag columns answer set by set.
type tagSet struct {
	id   string // the tags, sorted, as InfluxDB orders series
	tags map[string]string
	keys [][]string
}

// rawTagged answers a raw SELECT with tag columns of one group: the rows of each tag
// set with that set's tag values in the tag columns, merged by time (sets in the
// order of their tags at equal times).
func (ex *executor) rawTagged(g group) (*row, error) {
	tables, err := ex.setTables(g)
	if err != nil {
		return nil, err
	}
	if t, ok := mergeSets(ex.p.cols, g.sets, tables, ex.p.desc, ex.h.tiesBySet); ok {
		return &row{table: t}, nil
	}
	// A field of one name holds different types in different series: the rows boxed.
	type timedRow struct {
		t int64
		r []any
	}
	var all []timedRow
	for si, set := range g.sets {
		t := tables[si]
		for i, r := range t.values() {
			for c, col := range ex.p.cols {
				if col.tag {
					if v, ok := set.tags[col.field]; ok {
						r[c+1] = v
					}
				}
			}
			all = append(all, timedRow{t.times[i], r})
		}
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].t < all[b].t })
	out := make([][]any, len(all))
	for i := range all {
		out[i] = all[i].r
	}
	return &row{Values: out}, nil
}

// setTables returns the raw rows of each tag set of a group.
func (ex *executor) setTables(g group) ([]*rawTable, error) {
	tables := make([]*rawTable, len(g.sets))
	for i, set := range g.sets {
		var err error
		if tables[i], err = ex.rawRows(set.keys); err != nil {
			return nil, err
		}
	}
	return tables, nil
}

// mergeSets returns the rows of the tag sets' tables as one table, by time and, at
// equal times, in InfluxDB's order (rawOrder; desc for ORDER BY time DESC), or in the
// ascending order of the sets' tags when bySet; a tag column holds each row's set's
// value of the tag. ok is false when a field holds values of different types in
// different sets.
func mergeSets(cols []column, sets []tagSet, tables []*rawTable, desc, bySet bool) (_ *rawTable, ok bool) {
	if len(tables) == 1 {
		return withTags(cols, sets[0], tables[0]), true
	}
	if bySet {
		return mergeRows(cols, sets, tables, setOrder(sets, tables, desc))
	}
	// The tag columns' values of each set, looked up once: the merge compares them at
	// every tie.
	tagVals := make([][]string, len(sets))
	tagHas := make([][]bool, len(sets))
	for s, set := range sets {
		tagVals[s], tagHas[s] = make([]string, len(cols)), make([]bool, len(cols))
		for c, col := range cols {
			if col.tag {
				tagVals[s][c], tagHas[s][c] = set.tags[col.field]
			}
		}
	}
	// InfluxDB compares its auxiliary fields at ties in the order of their names
	// (query/select.go sorts opt.Aux), each once, not in the order of the columns.
	byName := make([]int, len(cols))
	for c := range byName {
		byName[c] = c
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(cols[a].field, cols[b].field) })
	byName = slices.CompactFunc(byName, func(a, b int) bool { return cols[a].field == cols[b].field })
	aux := func(set, row int32, i int) (string, bool) {
		c := byName[i]
		if cols[c].tag {
			return tagVals[set][c], tagHas[set][c]
		}
		return tables[set].stringAt(c, int(row))
	}
	times := make([][]int64, len(tables))
	for i, t := range tables {
		times[i] = t.times
	}
	return mergeRows(cols, sets, tables, rawOrder(times, desc, len(byName), aux))
}

// setOrder returns the rows of the tag sets' tables by time and, at equal times, in
// the ascending order of the sets' own tags as InfluxDB orders tag sets (Tags.ID: the
// values in the order of their keys, as subsetID orders them): the order of the stream of an aggregate
// subquery, which an outer raw statement keeps (Handler.tiesBySet). Descending, the
// rows are listed in reverse, as rawOrder lists them.
func setOrder(sets []tagSet, tables []*rawTable, desc bool) []setRow {
	ids := make([]string, len(sets))
	for s, set := range sets {
		ids[s] = subsetID("", set.tags, ownKeys(set.tags)) // sublimit.go
	}
	var out []setRow
	for s, t := range tables {
		for i, tm := range t.times {
			out = append(out, setRow{tm, int32(s), int32(i)})
		}
	}
	slices.SortFunc(out, func(a, b setRow) int {
		if a.t != b.t {
			return cmp.Compare(a.t, b.t)
		}
		c := strings.Compare(ids[a.set], ids[b.set])
		if desc {
			c = -c
		}
		if c == 0 {
			c = cmp.Compare(a.row, b.row)
		}
		return c
	})
	return out
}

// setRow is row `row` of tag set `set`'s table, at time t.
type setRow struct {
	t        int64
	set, row int32
}

// mergeRows returns the rows refs name, in their order, as one table; ok is false when
// a field holds values of different types in different sets.
func mergeRows(cols []column, sets []tagSet, tables []*rawTable, refs []setRow) (_ *rawTable, ok bool) {
	out := make([]rawColumn, len(cols))
	times := make([]int64, len(refs))
	for i, rf := range refs {
		times[i] = rf.t
	}
	for c, col := range cols {
		pts := &series.Points{}
		at := make([]int32, len(refs))
		if col.tag {
			// One value per set, at the set's index.
			pts.Type = series.String
			for _, set := range sets {
				pts.T, pts.S = append(pts.T, 0), append(pts.S, set.tags[col.field])
			}
			for i, rf := range refs {
				if _, has := sets[rf.set].tags[col.field]; has {
					at[i] = rf.set
				} else {
					at[i] = -1
				}
			}
		} else {
			// The sets' points one after the other; off[s] is where set s's begin.
			off := make([]int32, len(tables))
			for s, t := range tables {
				q := t.cols[c].pts
				if q.Len() == 0 {
					continue
				}
				if pts.Type != series.Unknown && pts.Type != q.Type {
					return nil, false
				}
				off[s] = int32(pts.Len())
				pts.Type = q.Type
				pts.T, pts.F, pts.I, pts.S = append(pts.T, q.T...), append(pts.F, q.F...), append(pts.I, q.I...), append(pts.S, q.S...)
			}
			for i, rf := range refs {
				src := &tables[rf.set].cols[c]
				j := rf.row
				if src.at != nil {
					j = src.at[rf.row]
				}
				if j < 0 {
					at[i] = -1
				} else {
					at[i] = off[rf.set] + j
				}
			}
		}
		out[c] = rawColumn{pts: pts, at: at}
	}
	return newRawTable(times, out), true
}

// withTags fills the tag columns of one tag set's table with the set's values: the
// rows need no merging.
func withTags(cols []column, set tagSet, t *rawTable) *rawTable {
	for c, col := range cols {
		if !col.tag {
			continue
		}
		v, has := set.tags[col.field]
		at := make([]int32, len(t.times)) // every row: point 0, the value
		if !has {
			for i := range at {
				at[i] = -1
			}
		}
		t.cols[c] = rawColumn{pts: &series.Points{Type: series.String, T: []int64{0}, S: []string{v}}, at: at}
	}
	return t
}

// ownKeys returns the keys of a series' own tags (not tsdht's __ ones), sorted.
func ownKeys(tags map[string]string) []string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		if !strings.HasPrefix(k, "__") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// setID returns a series' own tags as InfluxDB's series key holds them (k=v pairs
// sorted by key, escaped, comma-separated), which orders the rows of equal times.
func setID(tags map[string]string) string {
	var b strings.Builder
	for i, k := range ownKeys(tags) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tagEscaper.Replace(k))
		b.WriteByte('=')
		b.WriteString(tagEscaper.Replace(tags[k]))
	}
	return b.String()
}
