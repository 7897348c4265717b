package wire

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestShapeRoundTrip checks that a shape crosses the wire as it is, and that a reply
// that breaks the shape's order or limits is refused.
func TestShapeRoundTrip(t *testing.T) {
	s := catalog.Shape{Series: 3, TagKeys: map[string][]string{"cpu": {"dc", "host"}},
		Values: map[string][]string{"cpu": {"h1", "h2"}, "mem": {"h3"}}, HasValues: true,
		Fields: []catalog.ShapeField{
			{Measurement: "cpu", Field: "n", Type: series.Int, MinKey: "a", MaxKey: "b", Spans: []catalog.Span{{First: 1, Last: 2}, {First: 5, Last: 9}}},
			{Measurement: "cpu", Field: "usage", Type: series.Float, MinKey: "c", MaxKey: "c", Unbounded: true},
		}}
	b, err := msgpack.Marshal(EncodeShape(s))
	if err != nil {
		t.Fatal(err)
	}
	var resp ShapeResp
	if err := msgpack.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	got, err := resp.Decode()
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("got %+v, %v; want %+v", got, err, s)
	}
	for name, bad := range map[string]func(r *ShapeResp){
		"odd spans":       func(r *ShapeResp) { r.Fields[0].Spans = r.Fields[0].Spans[:3] },
		"spans backwards": func(r *ShapeResp) { r.Fields[0].Spans = []int64{5, 9, 1, 2} },
		"fields unsorted": func(r *ShapeResp) { r.Fields[0], r.Fields[1] = r.Fields[1], r.Fields[0] },
		"unknown type":    func(r *ShapeResp) { r.Fields[1].Type = 9 },
		"tag keys twice":  func(r *ShapeResp) { r.TagKeys = append(r.TagKeys, r.TagKeys[0]) },
		"values twice":    func(r *ShapeResp) { r.Values = append(r.Values, r.Values[0]) },
		"values unsorted": func(r *ShapeResp) { r.Values[0].Keys = []string{"z", "a"} },
	} {
		r := EncodeShape(s)
		bad(r)
		if _, err := r.Decode(); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// A node that does not know ValuesOf decodes the request without it and answers
	// without HasValues: what the coordinator falls back on.
	type oldReq struct {
		Prefix      string `msgpack:"p"`
		DB          string `msgpack:"d"`
		Measurement string `msgpack:"m,omitempty"`
	}
	b, _ = msgpack.Marshal(&ShapeReq{Prefix: "db/", DB: "db", ValuesOf: "host"})
	var old oldReq
	if err := msgpack.Unmarshal(b, &old); err != nil || old.DB != "db" {
		t.Fatalf("an older node reads %+v, %v", old, err)
	}
	b, _ = msgpack.Marshal(EncodeShape(catalog.Shape{Series: 1}))
	resp = ShapeResp{}
	if err := msgpack.Unmarshal(b, &resp); err != nil || resp.HasValues {
		t.Fatalf("a shape without values decodes as %+v, %v", resp, err)
	}
	if _, err := (&ShapeReq{Prefix: "other/cpu", DB: "db"}).Query(); err == nil {
		t.Error("a prefix outside the database passed")
	}
}
