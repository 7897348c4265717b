package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// column is one selected expression of a SELECT.
type column struct {
	name  string  // the output column name
	field string  // the field read
	fn    agg.Fn  // 0 for a raw field, else the aggregate
	arg   float64 // percentile's N
	tag   bool    // a tag's value (field is the tag key), from SELECT * or a regex

	special string // "mode" or "integral" (fn is 0): computed here from the points (funcs.go)
	unit    int64  // integral's unit, ns
}

// group is the series of one output series (one tag set of GROUP BY): for each
// column, the keys of the series holding that column's field.
type group struct {
	tags map[string]string // values of the GROUP BY tags
	keys [][]string        // per column
	sets []tagSet          // the same series by full tag set, sorted by id (for tag columns)

	// ranged: the group's series are read over [from, to), not the plan's range (a
	// raw SELECT with LIMIT reads each group from where its points start: limit.go).
	ranged   bool
	from, to int64
}

// selectPlan is a SELECT resolved to series keys and a time range.
type selectPlan struct {
	name     string // measurement, the output series' name
	cols     []column
	groups   []group
	from, to int64 // [from, to): what is read, within the catalog's bounds of the series
	// rowTime is the time of an aggregate's row without GROUP BY time(): the
	// statement's lower bound.
	rowTime int64
	// timeName names the answer's first column: "time", or SELECT time AS t's alias.
	timeName string
	// fillFrom and fillTo are the range whose windows a GROUP BY time() answer shows
	// (filled when empty): the statement's, where from and to are only what is read.
	fillFrom, fillTo int64
	// given holds points of series already known over their group's range (a LIMIT 1
	// answered from the series' partials: limitone.go), taken as read.
	given    map[string]series.Points
	every    time.Duration
	win      windowing // how GROUP BY time() and tz() cut windows (every = wholeRange without)
	raw      bool
	fill     influxql.FillOption
	fillVal  any
	desc     bool
	limit    int
	offset   int
	hasLower bool
	tagCols  bool // some column is a tag's value

	names      []string // the answer's columns but time
	outs       []output // the answer's columns from the base columns (cols); nil: cols as they are
	transforms bool     // some output is a transformation
	lookBack   bool     // a transformation of windows sees the window before the first
	keepFrom   int64    // rows before are the look-back: not shown
	plainFrom  int64    // with a look-back, where the outputs that are no transformation start
	plain      bool     // some output is no transformation
	mathFields []int    // base columns of raw fields in math

	where *fieldCond // the WHERE clause's conditions on field values, nil without (fieldcond.go)

	listed map[string]SeriesInfo // the series read, as the catalog listed them (seriesSpan)
}

// infosOf returns the series of keys as the plan's listing found them; a key it did
// not list (resolved without a catalog), as its Key alone.
func (p *selectPlan) infosOf(keys []string) []SeriesInfo {
	out := make([]SeriesInfo, len(keys))
	for i, k := range keys {
		if in, ok := p.listed[k]; ok {
			out[i] = in
		} else {
			out[i] = SeriesInfo{Key: k}
		}
	}
	return out
}

// planSelect resolves a SELECT: its measurement, columns, time range, and the
// series it reads, through the catalog (Engine.Series) or, without one, by the
// exact keys its WHERE clause's tag equalities name.
func (h *Handler) planSelect(ctx context.Context, s *influxql.SelectStatement, db string, now time.Time) (*selectPlan, error) {
	m, ok := s.Sources[0].(*influxql.Measurement) // one measurement: execSelect
	if len(s.Sources) != 1 || !ok || m.Regex != nil || m.Name == "" {
		return nil, unsupported("FROM %s", s.Sources)
	}
	if m.Database != "" {
		db = m.Database
	}
	if db == "" {
		return nil, errDatabaseRequired
	}
	s, fm, err := h.expandListing(ctx, s, db, now, true)
	if err != nil {
		return nil, err
	}
	timeName := "time"
	if s, timeName, err = withoutTimeFields(s); err != nil {
		return nil, err
	}
	p := &selectPlan{name: m.Name, timeName: timeName, fill: s.Fill, fillVal: s.FillValue, desc: !s.TimeAscending(), limit: s.Limit, offset: s.Offset}
	for _, sf := range s.SortFields {
		if sf.Name != "" && sf.Name != "time" {
			return nil, fmt.Errorf("ORDER BY %s: only ORDER BY time [ASC|DESC] is supported", sf.Name)
		}
	}
	cond, tr, err := influxql.ConditionExpr(s.Condition, &influxql.NowValuer{Now: now})
	if err != nil {
		return nil, err
	}
	every, groupTags := s.Dimensions.Normalize()
	if _, err := s.GroupByInterval(); err != nil {
		return nil, err
	}
	if err := compileFields(s, every, p); err != nil {
		return nil, err
	}
	p.names = s.ColumnNames()[1:]
	if p.outs == nil {
		for i := range p.cols {
			p.cols[i].name = p.names[i]
		}
	}
	for _, c := range p.cols {
		p.tagCols = p.tagCols || c.tag
	}
	if every > 0 && p.raw {
		return nil, errors.New("GROUP BY time() requires an aggregate function")
	}
	p.every = every
	p.win = windowing{every: int64(wholeRange)} // tz() alone changes only how times are written
	if every > 0 {
		off, err := s.GroupByOffset()
		if err != nil {
			return nil, err
		}
		p.win = windowing{every: int64(every), offset: int64(off), loc: s.Location}
	}
	eq, rest, err := splitCondition(cond)
	if err != nil {
		return nil, err
	}
	var span seriesSpan
	listed, _ := fm.listed(db, m.Name)
	if p.groups, p.where, err = h.resolve(ctx, db, m.Name, p.cols, eq, rest, groupTags, listed, &span); err != nil {
		return nil, err
	}
	p.listed = span.infos
	p.tagColumns() // tagrefs.go
	p.from, p.hasLower = tr.Min.UnixNano(), !tr.Min.IsZero()
	p.rowTime = p.from
	if !p.hasLower {
		// InfluxDB answers over all time: from the earliest time the catalog bounds
		// the series by.
		// With GROUP BY time(), InfluxDB starts each group's windows at its first
		// point's (aggregateValues): answered where that is all it changes, one column
		// filled with null or not at all.
		switch {
		case every > 0 && (len(p.cols) != 1 || p.transforms || (p.fill != influxql.NullFill && p.fill != influxql.NoFill)):
			return nil, unsupported("GROUP BY time() without a lower time bound, of more than one column, with a transformation or with fill() other than null or none (add WHERE time >= …)")
		case span.n == 0:
			return p, nil // no series: nothing to answer
		case !span.ok:
			return nil, errors.New("a lower time bound is required (WHERE time >= '2024-01-01T00:00:00Z' or time > now() - 1h): the catalog holds no time bounds for some series")
		}
		p.from = span.first
	}
	p.keepFrom = math.MinInt64
	if p.transforms && p.desc {
		return nil, unsupported("ORDER BY time DESC with %s()", firstTransform(p.outs))
	}
	if p.lookBack {
		// A transformation of windows starts from the window before the first, as
		// InfluxDB's; the other columns' rows there are not shown.
		for _, o := range p.outs {
			if o.tr == nil && (p.fill == influxql.PreviousFill || p.fill == influxql.LinearFill) {
				return nil, unsupported("fill(previous) or fill(linear) beside %s()", firstTransform(p.outs))
			}
		}
		p.keepFrom, _ = p.win.window(p.from)
		p.plainFrom = p.from
		if p.from > math.MinInt64+int64(every) {
			p.from -= int64(every)
		}
	}
	switch {
	case !tr.Max.IsZero():
		p.to = tr.Max.UnixNano() + 1
	case every > 0:
		p.to = now.UnixNano() + 1
	default:
		p.to = now.Add(10 * time.Minute).UnixNano()
		if span.ok && span.last < math.MaxInt64 {
			// No point lies past the catalog's bounds (widened before points outside
			// them are stored): points stamped ahead of the clock are read, and a
			// series silent since long ago is read up to its last point, not up to
			// now (InfluxQL's lastpoint: last(*) GROUP BY a tag over all time).
			p.to = span.last + 1
		}
	}
	if every > 0 && p.from < p.to {
		if n := agg.WindowCount(p.from, p.to, int64(every)); n > int64(h.cfg.MaxQueryWindows) {
			return nil, fmt.Errorf("GROUP BY time(%v) over this range makes %d windows, more than the %d allowed: narrow the range or widen the interval",
				every, n, h.cfg.MaxQueryWindows)
		}
	}
	p.fillFrom, p.fillTo = p.from, p.to
	if every > 0 && !p.lookBack && span.ok && span.n > 0 && p.from < p.to {
		// Windows are cut at fixed times: reading only the windows that hold the
		// series' bounds answers the others empty, as reading them would, and the
		// answer still shows them (fillFrom, fillTo).
		if first, _ := p.win.window(span.first); first > p.from {
			p.from = first
		}
		if span.last < math.MaxInt64 {
			p.to = min(p.to, span.last+1)
		}
	}
	if every == 0 && span.ok && span.n > 0 {
		// No point lies outside the catalog's bounds of its series (widened before
		// points outside them are stored): a range that ends past the last point
		// (time < now()) is read up to it, not over the empty quanta after it, and one
		// that starts before the first point from it. An aggregate's row still shows
		// the statement's lower bound (rowTime).
		if span.last < math.MaxInt64 {
			p.to = min(p.to, span.last+1)
		}
		if !p.lookBack {
			p.from = max(p.from, span.first)
		}
	}
	if p.from >= p.to {
		return p, nil
	}
	return p, p.checkMathFields()
}

// withoutTimeFields returns s without the fields that name time alone (SELECT time,
// v; time AS t), and the name of the answer's first column, time's: every answer's
// first column is time already, as InfluxDB answers it, named as the last such
// field's alias. A statement of time alone is InfluxDB's error.
func withoutTimeFields(s *influxql.SelectStatement) (*influxql.SelectStatement, string, error) {
	name := "time"
	keep := make([]*influxql.Field, 0, len(s.Fields))
	for _, f := range s.Fields {
		if ref, ok := f.Expr.(*influxql.VarRef); ok && ref.Val == "time" {
			if f.Alias != "" {
				name = f.Alias
			}
			continue
		}
		keep = append(keep, f)
	}
	if len(keep) == len(s.Fields) {
		return s, name, nil
	}
	if len(keep) == 0 {
		return nil, name, errors.New("at least 1 non-time field must be queried")
	}
	c := *s
	c.Fields = keep
	return &c, name, nil
}

// splitCondition splits a WHERE clause (time already removed) into tag equalities
// joined by AND, and the rest. Two different values for one tag make eq nil and
// the condition impossible.
func splitCondition(cond influxql.Expr) (eq map[string]string, rest []influxql.Expr, err error) {
	eq = map[string]string{}
	impossible := false
	var walk func(e influxql.Expr)
	walk = func(e influxql.Expr) {
		switch e := e.(type) {
		case nil:
		case *influxql.ParenExpr:
			walk(e.Expr)
		case *influxql.BinaryExpr:
			if e.Op == influxql.AND {
				walk(e.LHS)
				walk(e.RHS)
				return
			}
			if e.Op == influxql.EQ {
				ref, ok1 := e.LHS.(*influxql.VarRef)
				lit, ok2 := e.RHS.(*influxql.StringLiteral)
				if !ok1 || !ok2 {
					ref, ok1 = e.RHS.(*influxql.VarRef)
					lit, ok2 = e.LHS.(*influxql.StringLiteral)
				}
				if ok1 && ok2 && (ref.Type == influxql.Unknown || ref.Type == influxql.Tag) { // not cast as a field
					if v, seen := eq[ref.Val]; seen && v != lit.Val {
						impossible = true
					}
					eq[ref.Val] = lit.Val
					return
				}
			}
			rest = append(rest, e)
		case *influxql.BooleanLiteral:
			if !e.Val {
				impossible = true
			}
		default:
			rest = append(rest, e)
		}
	}
	walk(cond)
	if impossible {
		return nil, nil, nil
	}
	return eq, rest, nil
}

// resolve finds the series each column reads, grouped by the GROUP BY tags, and the
// WHERE clause's conditions on field values (nil without). listed, when not nil, is
// every series of the measurement, as the statement's wildcards listed them.
// span, when not nil, is told the time bounds of the series found.
func (h *Handler) resolve(ctx context.Context, db, meas string, cols []column, eq map[string]string,
	rest []influxql.Expr, groupTags []string, listed []SeriesInfo, span *seriesSpan) ([]group, *fieldCond, error) {
	if eq == nil {
		return nil, nil, nil // the condition cannot hold
	}
	infos, err := h.listSeries(ctx, db, meas, cols, eq, rest, listed) // listing.go
	if errors.Is(err, ErrNeedsCatalog) {
		groups, err := exactGroups(db, meas, cols, eq, rest, groupTags)
		return groups, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	if len(infos) == 0 && len(eq) > 0 {
		if infos, eq, rest, err = h.fieldEqualities(ctx, db, meas, eq, rest); err != nil {
			return nil, nil, err
		}
	}
	if len(infos) == 0 {
		if err := h.databaseExists(ctx, db); err != nil {
			return nil, nil, err
		}
	}
	where, err := newFieldCond(infos, db, meas, rest)
	if err != nil {
		return nil, nil, err
	}
	tagRest := rest
	if where != nil {
		tagRest = nil // the tags of a condition on fields are decided by where.match
	}
	byTags := map[string]*group{}
	var order []string
	groupTags = slices.Sorted(slices.Values(groupTags)) // InfluxDB orders groups by their tags sorted by key
	for _, in := range infos {
		if in.Tags[TagDB] != db || in.Tags[TagMeasurement] != meas {
			continue
		}
		if !matches(in.Tags, eq, tagRest) || !where.match(in) {
			continue
		}
		gt := make(map[string]string, len(groupTags))
		var id strings.Builder
		for _, k := range groupTags {
			gt[k] = in.Tags[k]
			id.WriteString(k + "\x00" + in.Tags[k] + "\x00")
		}
		g := byTags[id.String()]
		if g == nil {
			g = &group{tags: gt, keys: make([][]string, len(cols))}
			byTags[id.String()] = g
			order = append(order, id.String())
		}
		sid := setID(in.Tags)
		si := sort.Search(len(g.sets), func(i int) bool { return g.sets[i].id >= sid })
		if si == len(g.sets) || g.sets[si].id != sid {
			own := make(map[string]string, len(in.Tags))
			for k, v := range in.Tags {
				if !strings.HasPrefix(k, "__") {
					own[k] = v
				}
			}
			g.sets = append(g.sets, tagSet{})
			copy(g.sets[si+1:], g.sets[si:])
			g.sets[si] = tagSet{id: sid, tags: own, keys: make([][]string, len(cols))}
		}
		for i, c := range cols {
			if !c.tag && in.Tags[TagField] == c.field {
				g.keys[i] = append(g.keys[i], in.Key)
				span.add(in)
				g.sets[si].keys[i] = append(g.sets[si].keys[i], in.Key)
			}
		}
	}
	sort.Strings(order)
	out := make([]group, 0, len(order))
	for _, id := range order {
		out = append(out, *byTags[id])
	}
	return out, where, nil
}

// matches reports whether a series' tags satisfy the WHERE clause. A tag the series
// does not carry is the empty string, as in InfluxDB's index: host != 'a' and
// host =~ /.*/ hold for a series without host, host = 'a' does not, and an equality
// with the empty string does.
func matches(tags map[string]string, eq map[string]string, rest []influxql.Expr) bool {
	for k, v := range eq {
		if tags[k] != v {
			return false
		}
	}
	if len(rest) == 0 {
		return true
	}
	for _, e := range rest {
		if !tagHolds(e, tags) {
			return false
		}
	}
	return true
}

// tagHolds evaluates condition e on a series' tags. A comparison of a tag with a
// string or a regular expression (=, !=, =~, !~) reads a tag the series does not
// carry as "", as InfluxDB's index does; anything else (two names compared, a
// number) as InfluxDB evaluates it at each point, where a missing name is null and
// every comparison with null false.
func tagHolds(e influxql.Expr, tags map[string]string) bool {
	switch e := e.(type) {
	case *influxql.ParenExpr:
		return tagHolds(e.Expr, tags)
	case *influxql.BinaryExpr:
		switch e.Op {
		case influxql.AND:
			return tagHolds(e.LHS, tags) && tagHolds(e.RHS, tags)
		case influxql.OR:
			return tagHolds(e.LHS, tags) || tagHolds(e.RHS, tags)
		case influxql.EQ, influxql.NEQ, influxql.EQREGEX, influxql.NEQREGEX:
			ref, ok := e.LHS.(*influxql.VarRef)
			lit := e.RHS
			if !ok {
				ref, ok = e.RHS.(*influxql.VarRef)
				lit = e.LHS
			}
			switch lit.(type) {
			case *influxql.StringLiteral, *influxql.RegexLiteral:
				if ok {
					ev := influxql.ValuerEval{Valuer: influxql.MapValuer{ref.Val: tags[ref.Val]}}
					return ev.EvalBool(e)
				}
			}
		}
	}
	vals := make(influxql.MapValuer, len(tags))
	for k, v := range tags {
		vals[k] = v
	}
	return (&influxql.ValuerEval{Valuer: vals}).EvalBool(e)
}

// pushable returns the tag equalities of eq the catalog's posting lists can select
// by: all but those with an empty value, which hold for the series without the tag.
func pushable(eq map[string]string) map[string]string {
	out := make(map[string]string, len(eq))
	for k, v := range eq {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// exactGroups resolves a SELECT without the catalog: the series read are those
// whose tag set is exactly the WHERE clause's tag equalities. It works only when
// the WHERE clause has nothing but equalities (joined by AND) and every GROUP BY tag
// is pinned by one.
func exactGroups(db, meas string, cols []column, eq map[string]string, rest []influxql.Expr, groupTags []string) ([]group, error) {
	if len(rest) > 0 {
		return nil, fmt.Errorf("WHERE %s: %w (until then a WHERE clause may only pin tags with tag = 'value' … AND …)", rest[0], ErrNeedsCatalog)
	}
	g := group{tags: map[string]string{}, keys: make([][]string, len(cols))}
	for _, k := range groupTags {
		v, ok := eq[k]
		if !ok {
			return nil, fmt.Errorf("GROUP BY %s: %w (until then GROUP BY may only name tags the WHERE clause pins)", k, ErrNeedsCatalog)
		}
		g.tags[k] = v
	}
	tags := sortedPairs(eq)
	for i, c := range cols {
		g.keys[i] = []string{LineKey(db, meas, tags, c.field)}
	}
	if len(groupTags) == 0 {
		g.tags = nil
	}
	return []group{g}, nil
}

// errDatabaseRequired is InfluxDB's error for a statement without a database; the
// request's db parameter or FROM db..m names one.
var errDatabaseRequired = errors.New("database name required")

// databaseExists returns InfluxDB's "database not found" error for a database no series
// of the catalog belongs to: a database exists here once something was written to it.
// It is asked only when a measurement has no series, so answers pay for it only then.
func (h *Handler) databaseExists(ctx context.Context, db string) error {
	// The database's shape counts its series without sending their entries.
	if sh, ok, err := h.shape(ctx, db, ""); err != nil {
		return err
	} else if ok {
		if sh.Series == 0 {
			return errDatabaseNotFound(db)
		}
		return nil
	}
	infos, err := h.eng.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db}, Prefix: db + "/"})
	if errors.Is(err, ErrNeedsCatalog) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, in := range infos {
		if in.Tags[TagDB] == db {
			return nil
		}
	}
	return errDatabaseNotFound(db)
}

// seriesSpan bounds the times of the series a statement reads, from the catalog, and
// keeps each as listed.
type seriesSpan struct {
	n           int  // series seen
	ok          bool // every one has bounds
	first, last int64
	infos       map[string]SeriesInfo
}

func (sp *seriesSpan) add(in SeriesInfo) {
	if sp == nil {
		return
	}
	if sp.n == 0 {
		sp.ok, sp.first, sp.last = true, math.MaxInt64, math.MinInt64
		sp.infos = map[string]SeriesInfo{}
	}
	sp.infos[in.Key] = in
	sp.n++
	sp.ok = sp.ok && in.HasBounds
	sp.first, sp.last = min(sp.first, in.First), max(sp.last, in.Last)
}
