package catalog

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// shapeEntries returns line-protocol entries of database "db": measurements m0..m2,
// fields f0..f3 (f3 of another type in m2), hosts with tag keys that vary, bounds here
// and there; some dead, some of database "other", some without a measurement tag.
func shapeEntries(r *rand.Rand, n int) []Entry {
	var out []Entry
	seen := map[string]bool{} // a key has one entry (replicas' copies merge into it)
	for i := 0; i < n; i++ {
		db := "db"
		if r.Intn(10) == 0 {
			db = "other"
		}
		m, f := fmt.Sprintf("m%d", r.Intn(3)), fmt.Sprintf("f%d", r.Intn(4))
		typ := series.Float
		if f == "f3" {
			typ = series.Int
			if m == "m2" && r.Intn(2) == 0 {
				typ = series.String
			}
		}
		host := fmt.Sprintf("h%d", r.Intn(20))
		e := Entry{Key: fmt.Sprintf("%s/%s,host=%s#%s", db, m, host, f), Type: typ, Created: 1,
			Tags: []Tag{{TagDB, db}, {TagField, f}, {TagMeasurement, m}, {"host", host}}}
		if seen[e.Key] {
			continue
		}
		seen[e.Key] = true
		if r.Intn(3) == 0 {
			e.Tags = append(e.Tags, Tag{"rack", "r1"})
		}
		if r.Intn(20) == 0 {
			e.Tags = slices.DeleteFunc(e.Tags, func(t Tag) bool { return t.K == TagMeasurement })
		}
		slices.SortFunc(e.Tags, func(a, b Tag) int { return strings.Compare(a.K, b.K) })
		if r.Intn(4) > 0 {
			e.HasBounds, e.First = true, int64(r.Intn(MaxFieldSpans-2)*80) // spans never joined across gaps
			e.Last = e.First + int64(r.Intn(50))
		}
		if r.Intn(8) == 0 {
			e.Created, e.Type = 0, series.Unknown // deleted
		}
		out = append(out, e)
	}
	return out
}

// TestShapeIsTheUnionOfReplicas checks that replicas' shapes, each of the entries it
// holds (overlapping, in any order), merge into the shape of all the entries, and that
// the shape answers what a scan of every entry answers: the fields written in a range
// with the type of their first key, and the tag keys.
func TestShapeIsTheUnionOfReplicas(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		es := shapeEntries(r, 1+r.Intn(60))
		q := ShapeQuery{Prefix: "db/", DB: "db"}
		if round%2 == 1 {
			q = ShapeQuery{Prefix: "db/m1", DB: "db", Measurement: "m1"}
		}
		if round%3 == 1 {
			q.ValuesOf = "host"
		}
		var whole Shape
		for _, e := range es {
			if err := whole.Add(q, e); err != nil {
				t.Fatal(err)
			}
		}
		var merged Shape
		for rep := 0; rep < 3; rep++ {
			var one Shape
			for _, i := range r.Perm(len(es)) {
				if i%3 != rep || r.Intn(3) == 0 { // each entry on at least one replica
					if err := one.Add(q, es[i]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := merged.Merge(one); err != nil {
				t.Fatal(err)
			}
		}
		// Counting differs (replicas overlap); the rest must not.
		merged.Series, whole.Series = 0, 0
		if !reflect.DeepEqual(merged, whole) {
			t.Fatalf("round %d: replicas merged\n%+v\nall entries\n%+v", round, merged, whole)
		}
		if err := whole.Validate(); err != nil {
			t.Fatal(err)
		}
		lo := int64(r.Intn(1100))
		hi := lo + int64(r.Intn(100))
		// A field of one type: the type. Of several (refused at /write): the type of
		// least key among those with a series in the range.
		type row struct {
			meets  bool
			minKey string
		}
		rows := map[string]map[series.Type]*row{}
		tags, values := map[string]bool{}, map[string]bool{}
		for _, e := range es {
			m := tagValue(e.Tags, TagMeasurement)
			if !e.Live() || !strings.HasPrefix(e.Key, q.Prefix) || tagValue(e.Tags, TagDB) != "db" || (q.Measurement != "" && m != q.Measurement) {
				continue
			}
			for _, tg := range e.Tags {
				if !strings.HasPrefix(tg.K, "__") {
					tags[m+"."+tg.K] = true
				}
				if tg.K == q.ValuesOf {
					values[m+"="+tg.V] = true
				}
			}
			f := m + "." + tagValue(e.Tags, TagField)
			if rows[f] == nil {
				rows[f] = map[series.Type]*row{}
			}
			rw := rows[f][e.Type]
			if rw == nil {
				rw = &row{minKey: e.Key}
				rows[f][e.Type] = rw
			}
			rw.minKey = min(rw.minKey, e.Key)
			rw.meets = rw.meets || !e.HasBounds || (e.Last >= lo && e.First <= hi)
		}
		want := map[string]series.Type{}
		for f, byType := range rows {
			best := ""
			for typ, rw := range byType {
				if rw.meets && (best == "" || rw.minKey < best) {
					best, want[f] = rw.minKey, typ
				}
			}
		}
		got, gotTags := map[string]series.Type{}, map[string]bool{}
		gotFirst := map[string]string{}
		for _, f := range whole.Fields {
			k := f.Measurement + "." + f.Field
			if f.Meets(lo, hi) {
				if m, seen := gotFirst[k]; !seen || f.MinKey < m {
					gotFirst[k], got[k] = f.MinKey, f.Type
				}
			}
		}
		for m, ks := range whole.TagKeys {
			for _, k := range ks {
				gotTags[m+"."+k] = true
			}
		}
		gotValues := map[string]bool{}
		for m, vs := range whole.Values {
			if !slices.IsSorted(vs) {
				t.Fatalf("round %d: values of %s unsorted: %v", round, m, vs)
			}
			for _, v := range vs {
				gotValues[m+"="+v] = true
			}
		}
		if !reflect.DeepEqual(gotValues, values) {
			t.Fatalf("round %d: values of %q: shape %v, entries %v", round, q.ValuesOf, gotValues, values)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotTags, tags) {
			for _, f := range whole.Fields {
				t.Logf("%+v", f)
			}
			for f, bt := range rows {
				for typ, rw := range bt {
					t.Logf("%s %v %+v", f, typ, *rw)
				}
			}
			t.Fatalf("round %d [%d, %d]: shape answers %v %v, the entries %v %v", round, lo, hi, got, gotTags, want, tags)
		}
	}
}

func tagValue(tags []Tag, k string) string {
	for _, t := range tags {
		if t.K == k {
			return t.V
		}
	}
	return ""
}

// TestShapeLimits checks that a shape refuses to grow past its limits and that spans
// past MaxFieldSpans are joined, only ever widening.
func TestShapeLimits(t *testing.T) {
	q := ShapeQuery{Prefix: "db/", DB: "db"}
	var s Shape
	var err error
	for i := 0; i <= MaxShapeFields && err == nil; i++ {
		f := fmt.Sprint("f", i)
		err = s.Add(q, Entry{Key: "db/m#" + f, Type: series.Float, Created: 1,
			Tags: []Tag{{TagDB, "db"}, {TagField, f}, {TagMeasurement, "m"}}})
	}
	if err != ErrShapeTooLarge || len(s.Fields) != MaxShapeFields {
		t.Fatalf("past %d fields: %v, %d fields", MaxShapeFields, err, len(s.Fields))
	}
	var one Shape
	for i := 0; i < 3*MaxFieldSpans; i++ {
		e := Entry{Key: fmt.Sprint("db/m,h=", i, "#f"), Type: series.Float, Created: 1, HasBounds: true, First: int64(i * i * 10), Last: int64(i*i*10 + 1),
			Tags: []Tag{{TagDB, "db"}, {TagField, "f"}, {TagMeasurement, "m"}}}
		if err := one.Add(q, e); err != nil {
			t.Fatal(err)
		}
		if !one.Fields[0].Meets(e.First, e.Last) {
			t.Fatalf("entry %d's span [%d, %d] lost", i, e.First, e.Last)
		}
	}
	if n := len(one.Fields[0].Spans); n != MaxFieldSpans {
		t.Fatalf("%d spans, want %d", n, MaxFieldSpans)
	}
	if err := one.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (ShapeQuery{Prefix: "x/", DB: "db"}).Validate(); err == nil {
		t.Fatal("a prefix outside the database passed")
	}
	// Past MaxShapeTagValues values of the key asked for, the shape is too large.
	var vs Shape
	qv := ShapeQuery{Prefix: "db/", DB: "db", ValuesOf: "host"}
	err = nil
	for i := 0; i <= MaxShapeTagValues && err == nil; i++ {
		h := fmt.Sprint("h", i)
		err = vs.Add(qv, Entry{Key: "db/m,host=" + h + "#f", Type: series.Float, Created: 1,
			Tags: []Tag{{TagDB, "db"}, {TagField, "f"}, {TagMeasurement, "m"}, {"host", h}}})
	}
	if err != ErrShapeTooLarge || len(vs.Values["m"]) != MaxShapeTagValues {
		t.Fatalf("past %d values: %v, %d values", MaxShapeTagValues, err, len(vs.Values["m"]))
	}
}
