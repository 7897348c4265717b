package httpapi

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Conditions on field values (WHERE usage_user > 90), evaluated as InfluxDB 1.x's
// storage engine evaluates them.
//
// InfluxDB reduces a WHERE clause per series: its tag comparisons are decided by the
// series' tags (a series whose reduced clause is false is not read), and what is left
// is evaluated at each point the series yields, against the values the condition's
// fields hold at that point's time in the same series (null where a field has no point
// then: every comparison with null is false). A raw SELECT yields a row at each time
// one of its selected fields has a point; an aggregate yields each point of its field,
// filtered before it is aggregated. Both are the same as dropping, from each series a
// statement reads, the points at whose times the clause does not hold: that is what the
// executor does (whereFields), so the rest of the executor is unchanged. The fields of
// the condition are read even when they are not selected; aggregates are computed here
// from the filtered points, never from the replicas' partial aggregates. The statement's
// point cap counts the points it holds: the condition's fields whole, and of the other
// series the points the condition keeps.
//
// A cast in the condition reads the field as that type: ::float and ::integer convert
// between floats and integers (an integer cast of a float truncates), other types are
// null; ::tag reads the tag; ::field the field as it is.

// fieldCond is a SELECT's WHERE clause (time removed) when it names a field.
type fieldCond struct {
	cond   influxql.Expr
	fields map[string]influxql.DataType // the fields it names, by the type asked (Unknown: as stored)
	tagged map[string]bool              // names it reads as tags
	sets   map[string]*condSet          // by setID
	keySet map[string]*condSet          // a series key → its tag set
	named  map[string]bool              // the keys of the condition's fields' series
}

// condSet is one tag set (an InfluxDB series) of the measurement: the condition
// reduced by its tags, and its series of the condition's fields.
type condSet struct {
	cond influxql.Expr     // nil: true at every point
	keys map[string]string // field → series key
}

// newFieldCond returns the field condition of a WHERE clause's parts (rest, joined by
// AND) over the series of one measurement, nil when they name no field. A name is a
// field when the measurement has a field of that name or the clause casts it to a
// field type, else a tag; ::tag makes it a tag.
func newFieldCond(infos []SeriesInfo, db, meas string, rest []influxql.Expr) (*fieldCond, error) {
	if len(rest) == 0 {
		return nil, nil
	}
	measFields := map[string]bool{}
	for _, in := range infos {
		if in.Tags[TagDB] == db && in.Tags[TagMeasurement] == meas {
			measFields[in.Tags[TagField]] = true
		}
	}
	var cond influxql.Expr
	for _, e := range rest {
		if cond == nil {
			cond = e
		} else {
			cond = &influxql.BinaryExpr{Op: influxql.AND, LHS: cond, RHS: e}
		}
	}
	w := &fieldCond{cond: cond, fields: map[string]influxql.DataType{}, tagged: map[string]bool{},
		sets: map[string]*condSet{}, keySet: map[string]*condSet{}, named: map[string]bool{}}
	var err error
	influxql.WalkFunc(cond, func(n influxql.Node) {
		if err != nil {
			return
		}
		switch n := n.(type) {
		case *influxql.Call:
			err = unsupported("WHERE %s: functions in a WHERE clause (%s())", cond, n.Name)
		case *influxql.SubQuery, *influxql.Wildcard, *influxql.Distinct:
			err = unsupported("WHERE %s: %s in a WHERE clause", cond, n)
		case *influxql.VarRef:
			field := n.Type != influxql.Tag && (measFields[n.Val] || n.Type != influxql.Unknown)
			if !field {
				w.tagged[n.Val] = true
				return
			}
			if t, seen := w.fields[n.Val]; seen && t != n.Type {
				err = unsupported("WHERE %s: field %s compared as two types (%s and %s); cast it one way", cond, n.Val, t, n.Type)
			}
			w.fields[n.Val] = n.Type
		}
	})
	if err != nil {
		return nil, err
	}
	for name := range w.tagged {
		if _, both := w.fields[name]; both {
			return nil, unsupported("WHERE %s: %s read both as a field and as a tag", cond, name)
		}
	}
	if len(w.fields) == 0 {
		return nil, nil
	}
	return w, nil
}

// fieldEqualities is asked when no series carries the tag values a WHERE clause's
// equalities name (eq): some may be fields (state = 'idle'), which splitCondition
// cannot tell from tags. It returns the measurement's series and, when some equality
// names a field, eq without it and rest with it; else infos is empty, as it was.
func (h *Handler) fieldEqualities(ctx context.Context, db, meas string, eq map[string]string, rest []influxql.Expr) (
	[]SeriesInfo, map[string]string, []influxql.Expr, error) {
	infos, err := h.eng.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db, TagMeasurement: meas},
		Prefix: db + "/" + measurementEscaper.Replace(meas)})
	if err != nil {
		return nil, eq, rest, err
	}
	fields := map[string]bool{}
	for _, in := range infos {
		if in.Tags[TagDB] == db && in.Tags[TagMeasurement] == meas {
			fields[in.Tags[TagField]] = true
		}
	}
	tags := make(map[string]string, len(eq))
	for _, k := range slices.Sorted(maps.Keys(eq)) {
		if !fields[k] {
			tags[k] = eq[k]
			continue
		}
		rest = append(rest, &influxql.BinaryExpr{Op: influxql.EQ, LHS: &influxql.VarRef{Val: k}, RHS: &influxql.StringLiteral{Val: eq[k]}})
	}
	if len(tags) == len(eq) {
		return nil, eq, rest, nil
	}
	return infos, tags, rest, nil
}

// match reports whether a series' tags leave its condition possibly true, and records
// the series: its tag set's reduced condition, and its key when it holds a field of
// the condition. Without a field condition (w nil) every series matches.
func (w *fieldCond) match(in SeriesInfo) bool {
	if w == nil {
		return true
	}
	sid := setID(in.Tags)
	set := w.sets[sid]
	if set == nil {
		set = &condSet{keys: map[string]string{}, cond: w.reduce(in.Tags)}
		w.sets[sid] = set
	}
	if b, ok := set.cond.(*influxql.BooleanLiteral); ok && !b.Val {
		return false
	}
	if f := in.Tags[TagField]; f != "" {
		if _, named := w.fields[f]; named {
			if _, seen := set.keys[f]; !seen {
				set.keys[f] = in.Key
				w.named[in.Key] = true
			}
		}
	}
	w.keySet[in.Key] = set
	return true
}

// names reports whether key is the series of a field the condition names.
func (w *fieldCond) names(key string) bool { return w != nil && w.named[key] }

// setOf returns the tag set of series key whose condition filters its points, nil
// when none does.
func (w *fieldCond) setOf(key string) *condSet {
	if !w.filters(key) {
		return nil
	}
	return w.keySet[key]
}

// filters reports whether the condition may drop points of series key: not when the
// key's tags make it hold whatever its fields hold.
func (w *fieldCond) filters(key string) bool {
	if w == nil {
		return false
	}
	set := w.keySet[key]
	return set == nil || set.cond != nil
}

// reduce returns the condition with the tags it names replaced by the series' values;
// nil when it holds whatever the fields hold.
func (w *fieldCond) reduce(tags map[string]string) influxql.Expr {
	vals := influxql.MapValuer{}
	for name := range w.tagged {
		vals[name] = tags[name] // "" when the series does not carry it, as in InfluxDB
	}
	e := influxql.Reduce(w.cond, vals)
	if b, ok := e.(*influxql.BooleanLiteral); ok && b.Val {
		return nil
	}
	return e
}

// condCache is what an executor keeps of a field condition: the series of its fields
// as read, and each tag set's answers.
type condCache struct {
	points map[string]series.Points // the condition's fields' series, by key (readSeries)
	holds  map[*condSet]*condHolds
}

// condHolds is a tag set's condition evaluated once per time: at each time one of the
// condition's fields has a point, and where none has (every field null).
type condHolds struct {
	t    []int64 // ascending
	ok   []bool
	null bool
}

// whereFields returns the points of series key at whose times the statement's field
// condition holds.
func (ex *executor) whereFields(key string, pts series.Points) (series.Points, error) {
	if !ex.p.where.filters(key) || pts.Len() == 0 {
		return pts, nil
	}
	set := ex.p.where.keySet[key]
	if set == nil {
		return series.Points{Type: pts.Type}, nil // not a series of the condition's measurement and tags
	}
	h, err := ex.condHolds(set)
	if err != nil {
		return series.Points{}, err
	}
	keep := make([]bool, pts.Len())
	j := 0
	for i, t := range pts.T {
		for j < len(h.t) && h.t[j] < t {
			j++
		}
		keep[i] = h.null
		if j < len(h.t) && h.t[j] == t {
			keep[i] = h.ok[j]
		}
	}
	return keepPoints(pts, keep), nil
}

// condHolds evaluates a tag set's condition at every time its fields have a point,
// reading them on first use.
func (ex *executor) condHolds(set *condSet) (*condHolds, error) {
	if h, ok := ex.cond.holds[set]; ok {
		return h, nil
	}
	type condField struct {
		name string
		typ  influxql.DataType
		pts  series.Points
		pos  int
		slot int // its value's index in nums
	}
	var fs []condField
	for name, typ := range ex.p.where.fields {
		k, ok := set.keys[name]
		if !ok {
			continue // null at every time
		}
		pts, err := ex.readSeries(k)
		if err != nil {
			return nil, fmt.Errorf("reading field %s of the WHERE clause: %w", name, err)
		}
		fs = append(fs, condField{name: name, typ: typ, pts: pts})
	}
	vals := influxql.MapValuer{}
	ev := influxql.ValuerEval{Valuer: vals}
	h := &condHolds{null: ev.EvalBool(set.cond)}
	// Comparisons with numbers are compiled (condfast.go): each field a slot.
	index := map[string]int{}
	for name := range ex.p.where.fields {
		index[name] = len(index)
	}
	fast := compileCond(set.cond, index)
	for _, f := range fs {
		if f.pts.Type != series.Float && f.pts.Type != series.Int && f.pts.Len() > 0 {
			fast = nil
		}
	}
	nums := make([]numVal, len(index))
	most := 0 // the times are at least the most points of one field
	for j := range fs {
		fs[j].slot = index[fs[j].name]
		most = max(most, fs[j].pts.Len())
	}
	h.t, h.ok = make([]int64, 0, most), make([]bool, 0, most)
	for {
		t, any_ := int64(0), false
		for _, f := range fs {
			if f.pos < f.pts.Len() && (!any_ || f.pts.T[f.pos] < t) {
				t, any_ = f.pts.T[f.pos], true
			}
		}
		if !any_ {
			break
		}
		if fast != nil {
			for j := range fs {
				f := &fs[j]
				n := &nums[f.slot]
				*n = numVal{}
				if f.pos < f.pts.Len() && f.pts.T[f.pos] == t {
					if f.pts.Type == series.Int {
						*n = numVal{has: true, isInt: true, i: f.pts.I[f.pos]}
					} else {
						*n = numVal{has: true, f: f.pts.F[f.pos]}
					}
					f.pos++
				}
			}
			h.t, h.ok = append(h.t, t), append(h.ok, fast(nums))
			continue
		}
		for j := range fs {
			f := &fs[j]
			delete(vals, f.name)
			if f.pos < f.pts.Len() && f.pts.T[f.pos] == t {
				if v := castValue(&f.pts, f.pos, f.typ); v != nil {
					vals[f.name] = v
				}
				f.pos++
			}
		}
		h.t, h.ok = append(h.t, t), append(h.ok, ev.EvalBool(set.cond))
	}
	if ex.cond.holds == nil {
		ex.cond.holds = map[*condSet]*condHolds{}
	}
	ex.cond.holds[set] = h
	return h, nil
}

// castValue returns point i of p as the condition reads it: as stored, or cast to typ
// (nil when the point's type does not cast to it).
func castValue(p *series.Points, i int, typ influxql.DataType) any {
	switch {
	case typ == influxql.Float && p.Type == series.Int:
		return float64(p.I[i])
	case typ == influxql.Integer && p.Type == series.Float:
		return int64(p.F[i])
	case typ == influxql.Unknown || typ == influxql.AnyField || typ == influxType2(p.Type):
		return pointValue(p, i)
	}
	return nil
}
