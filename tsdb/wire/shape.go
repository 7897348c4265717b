package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// MethodShape asks a registry replica for the shape of a database's measurements as
// the entries it holds give it (catalog.Shape): ShapeReq → ShapeResp. Every node is
// asked once per listing; the coordinator merges the answers.
const MethodShape = "tsdb.shape"

// ShapeReq is a catalog.ShapeQuery on the wire.
type ShapeReq struct {
	Prefix      string `msgpack:"p"`
	DB          string `msgpack:"d"`
	Measurement string `msgpack:"m,omitempty"`
	// ValuesOf is catalog.ShapeQuery.ValuesOf, left out when empty; a node that does
	// not know it answers without values (ShapeResp.HasValues false).
	ValuesOf string `msgpack:"v,omitempty"`
}

// Query returns the request's query, checked.
func (r *ShapeReq) Query() (catalog.ShapeQuery, error) {
	q := catalog.ShapeQuery{Prefix: r.Prefix, DB: r.DB, Measurement: r.Measurement, ValuesOf: r.ValuesOf}
	return q, q.Validate()
}

// ShapeField is a catalog.ShapeField on the wire; Spans alternate firsts and lasts.
type ShapeField struct {
	Measurement string  `msgpack:"m"`
	Field       string  `msgpack:"f"`
	Type        uint8   `msgpack:"t"`
	MinKey      string  `msgpack:"lo"`
	MaxKey      string  `msgpack:"hi"`
	Unbounded   bool    `msgpack:"u,omitempty"`
	Spans       []int64 `msgpack:"s,omitempty"`
}

// ShapeTagKeys are the tag keys of one measurement.
type ShapeTagKeys struct {
	Measurement string   `msgpack:"m"`
	Keys        []string `msgpack:"k"`
}

// ShapeResp is a catalog.Shape on the wire.
type ShapeResp struct {
	Fields  []ShapeField   `msgpack:"f"`
	TagKeys []ShapeTagKeys `msgpack:"k"`
	Series  int            `msgpack:"n"`
	// Values are catalog.Shape.Values (ShapeTagKeys' Keys holding values), with
	// HasValues; both left out of a shape without.
	Values    []ShapeTagKeys `msgpack:"tv,omitempty"`
	HasValues bool           `msgpack:"hv,omitempty"`
}

// EncodeShape returns s as a message.
func EncodeShape(s catalog.Shape) *ShapeResp {
	r := &ShapeResp{Fields: make([]ShapeField, len(s.Fields)), Series: s.Series}
	for i, f := range s.Fields {
		w := ShapeField{Measurement: f.Measurement, Field: f.Field, Type: uint8(f.Type), MinKey: f.MinKey, MaxKey: f.MaxKey, Unbounded: f.Unbounded}
		for _, sp := range f.Spans {
			w.Spans = append(w.Spans, sp.First, sp.Last)
		}
		r.Fields[i] = w
	}
	r.TagKeys, r.Values, r.HasValues = encodeLists(s.TagKeys), encodeLists(s.Values), s.HasValues
	return r
}

// encodeLists returns per-measurement lists as messages.
func encodeLists(lists map[string][]string) []ShapeTagKeys {
	var out []ShapeTagKeys
	for m, l := range lists {
		out = append(out, ShapeTagKeys{Measurement: m, Keys: l})
	}
	return out
}

// Decode returns the shape the message carries, checked against catalog's limits.
func (r *ShapeResp) Decode() (catalog.Shape, error) {
	if len(r.Fields) > catalog.MaxShapeFields || len(r.TagKeys) > catalog.MaxShapeTagKeys || len(r.Values) > catalog.MaxShapeTagValues {
		return catalog.Shape{}, catalog.ErrShapeTooLarge
	}
	s := catalog.Shape{Fields: make([]catalog.ShapeField, len(r.Fields)), Series: r.Series, HasValues: r.HasValues}
	for i, w := range r.Fields {
		if len(w.Spans)%2 != 0 || len(w.Spans) > 2*catalog.MaxFieldSpans {
			return catalog.Shape{}, fmt.Errorf("shape: field %q: %d span bounds", w.Field, len(w.Spans))
		}
		t := series.Type(w.Type)
		if t != series.Float && t != series.Int && t != series.String {
			return catalog.Shape{}, fmt.Errorf("shape: field %q: unknown type %d", w.Field, w.Type)
		}
		f := catalog.ShapeField{Measurement: w.Measurement, Field: w.Field, Type: t, MinKey: w.MinKey, MaxKey: w.MaxKey, Unbounded: w.Unbounded}
		for j := 0; j < len(w.Spans); j += 2 {
			f.Spans = append(f.Spans, catalog.Span{First: w.Spans[j], Last: w.Spans[j+1]})
		}
		s.Fields[i] = f
	}
	var err error
	if s.TagKeys, err = decodeLists(r.TagKeys, "tag keys"); err != nil {
		return catalog.Shape{}, err
	}
	if s.Values, err = decodeLists(r.Values, "tag values"); err != nil {
		return catalog.Shape{}, err
	}
	return s, s.Validate()
}

// decodeLists returns the per-measurement lists of ls (nil when none); a measurement
// twice is an error.
func decodeLists(ls []ShapeTagKeys, what string) (map[string][]string, error) {
	var out map[string][]string
	for _, l := range ls {
		if out == nil {
			out = map[string][]string{}
		}
		if _, dup := out[l.Measurement]; dup {
			return nil, fmt.Errorf("shape: %s of %q twice", what, l.Measurement)
		}
		out[l.Measurement] = l.Keys
	}
	return out, nil
}
