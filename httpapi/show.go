package httpapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/influxdata/influxql"
)

// execShow answers the SHOW statements from the catalog (Engine.Series). Without
// one, they fail with ErrNeedsCatalog. LIMIT and OFFSET apply as InfluxDB 1.x applies
// them: to the list of measurements or of series, and to each measurement's tag keys,
// tag values and field keys; SHOW TAG KEYS' SLIMIT and SOFFSET change nothing, as
// they do not there.
func (h *Handler) execShow(ctx context.Context, stmt influxql.Statement, db string) ([]*row, error) {
	if _, ok := stmt.(*influxql.ShowDatabasesStatement); ok {
		infos, err := h.eng.Series(ctx, SeriesQuery{})
		if err != nil {
			return nil, fmt.Errorf("SHOW DATABASES: %w", err)
		}
		return []*row{listRow("databases", "name", distinct(infos, TagDB))}, nil
	}
	q := showQueryOf(stmt)
	if q.db == "" {
		q.db = db
	}
	var err error
	if q.cond, _, err = withoutTime(q.cond); err != nil {
		return nil, err
	}
	if _, fieldKeys := stmt.(*influxql.ShowFieldKeysStatement); fieldKeys {
		fields, err := h.showFields(ctx, q)
		if err != nil {
			return nil, err
		}
		return fieldKeyRows(fields, q.offset, q.limit), nil
	}
	// The shapes answer when the statement has no condition (nil set: list the series).
	var set *showSet
	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement, *influxql.ShowTagKeysStatement:
		set, err = h.showShapeKeys(ctx, q)
	case *influxql.ShowTagValuesStatement:
		var want func(string) bool
		if want, err = tagKeyFilter(s.Op, s.TagKeyExpr); err == nil {
			set, err = h.showShapeValues(ctx, q, want)
		}
	}
	if err == nil && set == nil {
		set, err = h.showSelect(ctx, q)
	}
	if err != nil {
		return nil, err
	}
	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		if ms := window(set.measurements, q.offset, q.limit); len(ms) > 0 {
			return []*row{listRow("measurements", "name", ms)}, nil
		}
		return nil, nil
	case *influxql.ShowTagKeysStatement:
		var rows []*row
		for _, m := range set.measurements {
			if keys := window(set.tagKeys(m), q.offset, q.limit); len(keys) > 0 {
				rows = append(rows, listRow(m, "tagKey", keys))
			}
		}
		return rows, nil
	case *influxql.ShowTagValuesStatement:
		want, err := tagKeyFilter(s.Op, s.TagKeyExpr)
		if err != nil {
			return nil, err
		}
		var rows []*row
		for _, m := range set.measurements {
			list := window(set.values(m, want), q.offset, q.limit)
			if len(list) == 0 {
				continue
			}
			r := &row{Name: m, Columns: []string{"key", "value"}}
			for _, p := range list {
				r.Values = append(r.Values, []any{p[0], p[1]})
			}
			rows = append(rows, r)
		}
		return rows, nil
	case *influxql.ShowSeriesStatement:
		if keys := window(seriesKeysOf(set.kept), q.offset, q.limit); len(keys) > 0 {
			return []*row{listRow("", "key", keys)}, nil
		}
		return nil, nil
	}
	return nil, fmt.Errorf("%s is not supported", stmt)
}

// showQuery is what a SHOW statement asks of the catalog: the database named in it
// (ON db; "" for the request's), the measurements, the condition on tags, and the
// OFFSET and LIMIT (0: none) of its lists.
type showQuery struct {
	what string // the statement's name, for errors: "SHOW TAG KEYS"
	db   string
	// noneIfMissing: a database without series answers nothing, not
	// errDatabaseNotFound (SHOW MEASUREMENTS).
	noneIfMissing bool
	sources       influxql.Sources
	cond          influxql.Expr
	offset, limit int
}

// showQueryOf returns the showQuery of a SHOW statement of the catalog.
func showQueryOf(stmt influxql.Statement) showQuery {
	q := showQuery{what: strings.SplitN(stmt.String(), " WHERE", 2)[0]}
	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		q.db, q.cond, q.offset, q.limit, q.noneIfMissing = s.Database, s.Condition, s.Offset, s.Limit, true
		if s.Source != nil {
			q.sources = influxql.Sources{s.Source}
		}
	case *influxql.ShowTagKeysStatement:
		q.db, q.sources, q.cond, q.offset, q.limit = s.Database, s.Sources, s.Condition, s.Offset, s.Limit
	case *influxql.ShowTagValuesStatement:
		q.db, q.sources, q.cond, q.offset, q.limit = s.Database, s.Sources, s.Condition, s.Offset, s.Limit
	case *influxql.ShowFieldKeysStatement:
		q.db, q.sources, q.offset, q.limit = s.Database, s.Sources, s.Offset, s.Limit
	case *influxql.ShowSeriesStatement:
		q.db, q.sources, q.cond, q.offset, q.limit = s.Database, s.Sources, s.Condition, s.Offset, s.Limit
	}
	return q
}

// withoutTime returns cond without its conditions on time, which a SHOW statement's
// WHERE clause ignores as InfluxDB 1.x does; hadTime says whether it had any.
func withoutTime(cond influxql.Expr) (_ influxql.Expr, hadTime bool, err error) {
	if cond == nil || !influxql.HasTimeExpr(cond) {
		return cond, false, nil
	}
	c, _, err := influxql.ConditionExpr(cond, &influxql.NowValuer{Now: time.Now()})
	return c, true, err
}

// showSet is the series of a database a SHOW statement selects, by measurement; or,
// made from the database's shapes (showShapeValues), only the measurements and the
// tag values of the keys the statement asks about.
type showSet struct {
	kept         []SeriesInfo
	byMeas       map[string][]SeriesInfo
	measurements []string               // sorted
	shapedKeys   map[string][]string    // by measurement, when made from a shape
	shaped       map[string][][2]string // (key, value) pairs by measurement, when made from shapes
}

// tagKeys returns the tag keys of measurement m, sorted.
func (set *showSet) tagKeys(m string) []string {
	if set.byMeas == nil {
		return set.shapedKeys[m]
	}
	return tagKeysOf(set.byMeas[m])
}

// values returns the (key, value) pairs of measurement m whose key want takes, sorted.
func (set *showSet) values(m string, want func(string) bool) [][2]string {
	if set.shaped != nil {
		return set.shaped[m] // only of the keys want takes
	}
	return tagValuesOf(set.byMeas[m], want)
}

// maxShapedKeys bounds the tag keys whose values SHOW TAG VALUES asks the shapes for,
// one request to every node each; past it, the series are listed.
const maxShapedKeys = 16

// showShapeValues returns the measurements of q and their tag values of the keys want
// takes from the database's shapes: one for the tag keys, then one per key selected,
// each with that key's values (catalog.ShapeQuery.ValuesOf), not the entries of every
// series. It returns nil when q has a condition, the keys are too many or a shape is
// not answered: the caller lists the series.
func (h *Handler) showShapeValues(ctx context.Context, q showQuery, want func(string) bool) (*showSet, error) {
	keyed, err := h.showShapeKeys(ctx, q)
	if err != nil || keyed == nil {
		return nil, err
	}
	ms := keyed.measurements
	selected := map[string]bool{}
	for _, m := range ms {
		for _, k := range keyed.shapedKeys[m] {
			selected[k] = want(k)
		}
	}
	maps.DeleteFunc(selected, func(_ string, take bool) bool { return !take })
	if len(selected) > maxShapedKeys {
		return nil, nil
	}
	meas, _ := oneMeasurement(q.sources)
	set := &showSet{shaped: map[string][][2]string{}}
	for _, k := range sortedSet(selected) {
		sh, ok, err := h.shapeWith(ctx, q.db, meas, k)
		if err != nil || !ok {
			return nil, err
		}
		for _, m := range ms {
			for _, v := range sh.Values[m] {
				set.shaped[m] = append(set.shaped[m], [2]string{k, v})
			}
		}
	}
	for _, m := range ms {
		if len(set.shaped[m]) > 0 {
			set.measurements = append(set.measurements, m)
		}
	}
	return set, nil
}

// errDatabaseNotFound is InfluxDB's error for a SHOW of a database without series.
func errDatabaseNotFound(db string) error { return fmt.Errorf("database not found: %s", db) }

// showSelect lists the series of q's database and keeps those of its measurements
// that satisfy its condition. The listing asks the catalog for the series that carry
// the condition's tag equalities and, with one measurement named, that measurement:
// the other series' entries are not read. A database without series is an error
// (errDatabaseNotFound) unless q.noneIfMissing.
func (h *Handler) showSelect(ctx context.Context, q showQuery) (*showSet, error) {
	if q.db == "" {
		return nil, errors.New("database name required: add db=NAME to the request or ON db to the statement")
	}
	eq, rest, err := splitCondition(q.cond)
	if err != nil {
		return nil, err
	}
	set := &showSet{byMeas: map[string][]SeriesInfo{}}
	match, prefix := pushable(eq), q.db+"/"
	match[TagDB] = q.db
	if m, ok := oneMeasurement(q.sources); ok {
		match[TagMeasurement], prefix = m, prefix+measurementEscaper.Replace(m)
	}
	var infos []SeriesInfo
	if eq != nil {
		if infos, err = h.eng.Series(ctx, SeriesQuery{Match: match, Prefix: prefix}); err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
	}
	if len(infos) == 0 && !q.noneIfMissing {
		if len(match) == 1 && eq != nil {
			return nil, errDatabaseNotFound(q.db) // the whole database was listed
		}
		if err := h.databaseExists(ctx, q.db); err != nil {
			return nil, err
		}
	}
	for _, in := range infos {
		if in.Tags[TagDB] != q.db || !matches(in.Tags, eq, rest) {
			continue
		}
		if len(q.sources) > 0 && !inSources(in.Tags[TagMeasurement], q.sources) {
			continue
		}
		set.kept = append(set.kept, in)
		m := in.Tags[TagMeasurement]
		set.byMeas[m] = append(set.byMeas[m], in)
	}
	set.measurements = sortedKeys(set.byMeas)
	return set, nil
}

// oneMeasurement returns the measurement sources names when it names exactly one,
// by name.
func oneMeasurement(sources influxql.Sources) (string, bool) {
	if len(sources) != 1 {
		return "", false
	}
	m, ok := sources[0].(*influxql.Measurement)
	if !ok || m.Regex != nil || m.Name == "" {
		return "", false
	}
	return m.Name, true
}

// showShapeKeys returns the measurements of q's database its sources select, with
// their tag keys, from the database's shape (shape.go): one small answer per node,
// not the listing of every series. It returns nil when q has a condition or the
// engine answers no shape: the caller lists the series.
func (h *Handler) showShapeKeys(ctx context.Context, q showQuery) (*showSet, error) {
	if q.cond != nil || q.db == "" {
		return nil, nil
	}
	sh, ok, err := h.shape(ctx, q.db, "")
	if err != nil || !ok {
		return nil, err
	}
	if sh.Series == 0 && !q.noneIfMissing {
		return nil, errDatabaseNotFound(q.db)
	}
	seen := map[string]bool{}
	for _, f := range sh.Fields {
		seen[f.Measurement] = true
	}
	for m := range sh.TagKeys {
		seen[m] = true
	}
	for m := range seen {
		if len(q.sources) > 0 && !inSources(m, q.sources) {
			delete(seen, m)
		}
	}
	return &showSet{measurements: sortedSet(seen), shapedKeys: sh.TagKeys}, nil
}

// showFields returns SHOW FIELD KEYS' fields of q (measurement → field → type): from
// the database's shape when the catalog answers one (shape.go), else from its series.
// As in InfluxDB, a condition selects no fields.
func (h *Handler) showFields(ctx context.Context, q showQuery) (map[string]map[string]string, error) {
	if q.db == "" {
		return nil, errors.New("database name required: add db=NAME to the request or ON db to the statement")
	}
	sh, ok, err := h.shape(ctx, q.db, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.what, err)
	}
	if ok {
		if sh.Series == 0 {
			return nil, errDatabaseNotFound(q.db)
		}
		return shapeFieldKeys(sh, q.sources), nil
	}
	q.cond = nil
	set, err := h.showSelect(ctx, q)
	if err != nil {
		return nil, err
	}
	fields := map[string]map[string]string{}
	for _, m := range set.measurements {
		fields[m] = map[string]string{}
		for _, in := range set.byMeas[m] {
			fields[m][in.Tags[TagField]] = influxType(in.Type)
		}
	}
	return fields, nil
}

// tagKeysOf returns the tag keys of infos, sorted.
func tagKeysOf(infos []SeriesInfo) []string {
	keys := map[string]bool{}
	for _, in := range infos {
		for k := range in.Tags {
			if !strings.HasPrefix(k, "__") {
				keys[k] = true
			}
		}
	}
	return sortedSet(keys)
}

// tagValuesOf returns the (key, value) pairs of infos whose key want takes, sorted.
func tagValuesOf(infos []SeriesInfo, want func(string) bool) [][2]string {
	pairs := map[[2]string]bool{}
	for _, in := range infos {
		for k, v := range in.Tags {
			if !strings.HasPrefix(k, "__") && want(k) {
				pairs[[2]string{k, v}] = true
			}
		}
	}
	list := make([][2]string, 0, len(pairs))
	for p := range pairs {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i][0] != list[j][0] {
			return list[i][0] < list[j][0]
		}
		return list[i][1] < list[j][1]
	})
	return list
}

// seriesKeysOf returns InfluxDB's series keys (measurement and tags, escaped) of
// infos, each once, sorted: the series of several fields with one tag set are one.
func seriesKeysOf(infos []SeriesInfo) []string {
	set := map[string]bool{}
	for _, in := range infos {
		var tags []tagPair
		for k, v := range in.Tags {
			if !strings.HasPrefix(k, "__") {
				tags = append(tags, tagPair{k, v})
			}
		}
		_ = sortTags(tags)
		var b strings.Builder
		measurementEscaper.WriteString(&b, in.Tags[TagMeasurement])
		for _, t := range tags {
			b.WriteByte(',')
			tagEscaper.WriteString(&b, t.k)
			b.WriteByte('=')
			tagEscaper.WriteString(&b, t.v)
		}
		set[b.String()] = true
	}
	return sortedSet(set)
}

// window returns what OFFSET offset and LIMIT limit (0: none) keep of vals.
func window[T any](vals []T, offset, limit int) []T {
	if offset >= len(vals) {
		return nil
	}
	vals = vals[max(offset, 0):]
	if limit > 0 && limit < len(vals) {
		vals = vals[:limit]
	}
	return vals
}

// fieldKeyRows returns SHOW FIELD KEYS' rows: per measurement, in the order of their
// names, its fields' names and types (fields: measurement → field → type), those
// OFFSET offset and LIMIT limit keep of each.
func fieldKeyRows(fields map[string]map[string]string, offset, limit int) []*row {
	var rows []*row
	for _, m := range sortedKeys(fields) {
		names := window(sortedKeys(fields[m]), offset, limit)
		if len(names) == 0 {
			continue
		}
		r := &row{Name: m, Columns: []string{"fieldKey", "fieldType"}}
		for _, f := range names {
			r.Values = append(r.Values, []any{f, fields[m][f]})
		}
		rows = append(rows, r)
	}
	return rows
}

// tagKeyFilter returns which tag keys SHOW TAG VALUES WITH KEY op expr selects.
func tagKeyFilter(op influxql.Token, expr influxql.Literal) (func(string) bool, error) {
	switch lit := expr.(type) {
	case *influxql.StringLiteral:
		switch op {
		case influxql.EQ:
			return func(k string) bool { return k == lit.Val }, nil
		case influxql.NEQ:
			return func(k string) bool { return k != lit.Val }, nil
		}
	case *influxql.ListLiteral:
		set := map[string]bool{}
		for _, v := range lit.Vals {
			set[v] = true
		}
		return func(k string) bool { return set[k] }, nil
	case *influxql.RegexLiteral:
		switch op {
		case influxql.EQREGEX:
			return lit.Val.MatchString, nil
		case influxql.NEQREGEX:
			return func(k string) bool { return !lit.Val.MatchString(k) }, nil
		}
	}
	return nil, fmt.Errorf("SHOW TAG VALUES: unsupported WITH KEY clause")
}

func inSources(m string, sources influxql.Sources) bool {
	for _, s := range sources {
		if sm, ok := s.(*influxql.Measurement); ok {
			if (sm.Regex != nil && sm.Regex.Val.MatchString(m)) || sm.Name == m {
				return true
			}
		}
	}
	return false
}

func distinct(infos []SeriesInfo, tag string) []string {
	set := map[string]bool{}
	for _, in := range infos {
		if v, ok := in.Tags[tag]; ok {
			set[v] = true
		}
	}
	return sortedSet(set)
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listRow(name, column string, vals []string) *row {
	r := &row{Name: name, Columns: []string{column}}
	for _, v := range vals {
		r.Values = append(r.Values, []any{v})
	}
	return r
}
