package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tsdht/tsdht/tsdb/series"
)

// A measurement's shape: the fields of the line-protocol series (TagDB, TagMeasurement,
// TagField) of one database and their types, and the tag keys those series carry — what
// InfluxQL needs to expand SELECT * or answer SHOW FIELD KEYS, without the entries of
// every series. A registry replica summarises the live entries it holds (Shaper); the
// coordinator merges the replicas' shapes (Shape.Merge), so the answer is the union of
// what the replicas hold.

// ShapeQuery selects the entries a shape summarises: live ones whose key starts with
// Prefix and whose TagDB is DB and, when Measurement is not empty, whose TagMeasurement
// is Measurement.
type ShapeQuery struct {
	Prefix      string
	DB          string
	Measurement string
	// ValuesOf, when not empty, is a tag key whose values the shape carries too, per
	// measurement (Shape.Values): SHOW TAG VALUES WITH KEY without the entries of every
	// series.
	ValuesOf string
}

// Validate checks a query from the wire.
func (q ShapeQuery) Validate() error {
	if q.DB == "" {
		return fmt.Errorf("shape: no database")
	}
	if len(q.Prefix) > series.MaxKeyLen || !strings.HasPrefix(q.Prefix, q.DB+"/") {
		return fmt.Errorf("shape of %q: the key prefix %q does not begin with %q", q.DB, q.Prefix, q.DB+"/")
	}
	if len(q.ValuesOf) > series.MaxKeyLen {
		return fmt.Errorf("shape of %q: a tag key of %d bytes; at most %d", q.DB, len(q.ValuesOf), series.MaxKeyLen)
	}
	return nil
}

// Limits of a shape, enforced by Add and by the wire decoder: a database past them is
// listed series by series instead (ErrShapeTooLarge).
const (
	MaxShapeFields  = 4096 // (measurement, field, type) rows
	MaxShapeTagKeys = 4096 // (measurement, tag key) pairs
	// MaxShapeTagValues bounds the (measurement, value) pairs of ShapeQuery.ValuesOf.
	MaxShapeTagValues = 16384
	MaxFieldSpans     = 16 // time spans per row; more are joined across their gaps
)

// ErrShapeTooLarge is wrapped when a shape would pass its limits.
var ErrShapeTooLarge = fmt.Errorf("measurement shape too large: more than %d fields, %d tag keys or %d tag values",
	MaxShapeFields, MaxShapeTagKeys, MaxShapeTagValues)

// Span is a closed range of times [First, Last].
type Span struct{ First, Last int64 }

// ShapeField is one field of one measurement holding one type: the least and greatest
// keys of its series of that type, and the time spans their entries' bounds cover
// (Unbounded when one of them has none).
type ShapeField struct {
	Measurement, Field string
	Type               series.Type
	MinKey, MaxKey     string
	Unbounded          bool
	Spans              []Span // sorted, disjoint
}

// Meets reports whether one of the field's series may hold times in [lo, hi] (closed).
func (f *ShapeField) Meets(lo, hi int64) bool {
	if f.Unbounded {
		return true
	}
	for _, s := range f.Spans {
		if s.Last >= lo && s.First <= hi {
			return true
		}
	}
	return false
}

// Shape is a summary of entries: fields sorted by (measurement, field, type), and tag
// keys (user tags: no "__" prefix) per measurement, sorted.
type Shape struct {
	Fields  []ShapeField
	TagKeys map[string][]string // measurement → tag keys
	Series  int                 // live entries summarised
	// Values are the values of the query's ValuesOf per measurement, sorted. HasValues
	// says the shape was made for such a query: its maker sets it (a replica that does
	// not know ValuesOf answers without it).
	Values    map[string][]string
	HasValues bool
}

// Add summarises e into s when q selects it; it reports ErrShapeTooLarge past the
// limits. Add entries in any order.
func (s *Shape) Add(q ShapeQuery, e Entry) error {
	if !e.Live() || !strings.HasPrefix(e.Key, q.Prefix) {
		return nil
	}
	var db, meas, field string
	var hasDB, hasMeas bool
	for _, t := range e.Tags {
		switch t.K {
		case TagDB:
			db, hasDB = t.V, true
		case TagMeasurement:
			meas, hasMeas = t.V, true
		case TagField:
			field = t.V
		}
	}
	if !hasDB || db != q.DB || (q.Measurement != "" && (!hasMeas || meas != q.Measurement)) {
		return nil
	}
	s.Series++
	for _, t := range e.Tags {
		if strings.HasPrefix(t.K, "__") {
			continue
		}
		if t.K == q.ValuesOf {
			if err := s.addValue(meas, t.V); err != nil {
				return err
			}
		}
		if err := addSorted(&s.TagKeys, meas, t.K, MaxShapeTagKeys); err != nil {
			return err
		}
	}
	one := ShapeField{Measurement: meas, Field: field, Type: e.Type, MinKey: e.Key, MaxKey: e.Key, Unbounded: !e.HasBounds}
	if e.HasBounds {
		one.Spans = []Span{{e.First, e.Last}}
	}
	return s.addField(one)
}

// addValue adds value v of measurement m to s.Values.
func (s *Shape) addValue(m, v string) error { return addSorted(&s.Values, m, v, MaxShapeTagValues) }

// addSorted inserts v into lists[m], kept sorted and without repeats, made if nil;
// ErrShapeTooLarge when the lists hold limit strings already.
func addSorted(lists *map[string][]string, m, v string, limit int) error {
	if *lists == nil {
		*lists = map[string][]string{}
	}
	l := (*lists)[m]
	if i, found := slices.BinarySearch(l, v); !found {
		if total(*lists) >= limit {
			return ErrShapeTooLarge
		}
		(*lists)[m] = slices.Insert(l, i, v)
	}
	return nil
}

// total counts the strings of lists.
func total(lists map[string][]string) int {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	return n
}

func fieldOrder(a, b ShapeField) int {
	if c := strings.Compare(a.Measurement, b.Measurement); c != 0 {
		return c
	}
	if c := strings.Compare(a.Field, b.Field); c != 0 {
		return c
	}
	return int(a.Type) - int(b.Type)
}

// addField merges one row into s.
func (s *Shape) addField(f ShapeField) error {
	i, found := slices.BinarySearchFunc(s.Fields, f, fieldOrder)
	if !found {
		if len(s.Fields) >= MaxShapeFields {
			return ErrShapeTooLarge
		}
		f.Spans = joinSpans(f.Spans)
		s.Fields = slices.Insert(s.Fields, i, f)
		return nil
	}
	g := &s.Fields[i]
	g.MinKey, g.MaxKey = min(g.MinKey, f.MinKey), max(g.MaxKey, f.MaxKey)
	g.Unbounded = g.Unbounded || f.Unbounded
	g.Spans = joinSpans(append(g.Spans, f.Spans...))
	return nil
}

// Merge merges another replica's shape into s: the union of both.
func (s *Shape) Merge(o Shape) error {
	s.Series = max(s.Series, o.Series) // replicas overlap: a lower bound of the union
	for m, keys := range o.TagKeys {
		for _, k := range keys {
			if err := addSorted(&s.TagKeys, m, k, MaxShapeTagKeys); err != nil {
				return err
			}
		}
	}
	for m, vs := range o.Values {
		for _, v := range vs {
			if err := s.addValue(m, v); err != nil {
				return err
			}
		}
	}
	for _, f := range o.Fields {
		f.Spans = slices.Clone(f.Spans) // o may be shared (a replica's cached shape)
		if err := s.addField(f); err != nil {
			return err
		}
	}
	return nil
}

// joinSpans sorts spans and joins those that overlap or touch; past MaxFieldSpans it
// joins the spans across the narrowest gaps, so a span list only ever widens.
func joinSpans(spans []Span) []Span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b Span) int {
		switch {
		case a.First < b.First:
			return -1
		case a.First > b.First:
			return 1
		}
		return 0
	})
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.First <= last.Last || sp.First-1 == last.Last {
			last.Last = max(last.Last, sp.Last)
			continue
		}
		out = append(out, sp)
	}
	for len(out) > MaxFieldSpans {
		narrow := 1
		for i := 2; i < len(out); i++ {
			if uint64(out[i].First-out[i-1].Last) < uint64(out[narrow].First-out[narrow-1].Last) {
				narrow = i
			}
		}
		out[narrow-1].Last = out[narrow].Last
		out = slices.Delete(out, narrow, narrow+1)
	}
	return out
}

// Validate checks a shape from the wire against the limits and its own order.
func (s *Shape) Validate() error {
	if len(s.Fields) > MaxShapeFields || total(s.TagKeys) > MaxShapeTagKeys {
		return ErrShapeTooLarge
	}
	for i := range s.Fields {
		f := &s.Fields[i]
		if i > 0 && fieldOrder(s.Fields[i-1], *f) >= 0 {
			return fmt.Errorf("shape: fields out of order at %q", f.Field)
		}
		if len(f.Spans) > MaxFieldSpans {
			return fmt.Errorf("shape: field %q has %d spans; at most %d", f.Field, len(f.Spans), MaxFieldSpans)
		}
		for j, sp := range f.Spans {
			if sp.First > sp.Last || (j > 0 && sp.First <= f.Spans[j-1].Last) {
				return fmt.Errorf("shape: field %q: spans out of order", f.Field)
			}
		}
	}
	for m, ks := range s.TagKeys {
		if !slices.IsSorted(ks) {
			return fmt.Errorf("shape: tag keys of %q out of order", m)
		}
	}
	if total(s.Values) > MaxShapeTagValues {
		return ErrShapeTooLarge
	}
	for m, vs := range s.Values {
		if !slices.IsSorted(vs) {
			return fmt.Errorf("shape: tag values of %q out of order", m)
		}
	}
	return nil
}
