package replica

import (
	"context"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// countingCatalog counts the entries a replica's store is asked to walk.
type countingCatalog struct {
	*store.Mem
	walked int
}

func (c *countingCatalog) Entries(after string, fn func(catalog.Entry) bool) error {
	return c.Mem.Entries(after, func(e catalog.Entry) bool { c.walked++; return fn(e) })
}

// TestShapeKeptUntilAnEntryChanges checks that a replica's shape of a measurement reads
// only the measurement's entries, is answered again without reading them while no entry
// changes, and is made again, with the change, once one does.
func TestShapeKeptUntilAnEntryChanges(t *testing.T) {
	st := &countingCatalog{Mem: store.NewMem()}
	l := New(Config{Store: st})
	entry := func(key, meas, field string, created int64) catalog.Entry {
		return catalog.Entry{Key: key, Type: series.Float, Created: created, MetaVersion: created,
			Tags: []catalog.Tag{{K: catalog.TagDB, V: "db"}, {K: catalog.TagField, V: field}, {K: catalog.TagMeasurement, V: meas}, {K: "host", V: "a"}}}
	}
	for _, e := range []catalog.Entry{entry("db/cpu,host=a#u", "cpu", "u", 1), entry("db/cpu,host=a#v", "cpu", "v", 1),
		entry("db/cpu2,host=a#w", "cpu2", "w", 1), entry("db/mem,host=a#f", "mem", "f", 1), entry("da/cpu#x", "cpu", "x", 1)} {
		if _, err := st.MergeEntry(e); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	q := catalog.ShapeQuery{Prefix: "db/cpu", DB: "db", Measurement: "cpu"}
	fields := func() []string {
		t.Helper()
		s, err := l.Shape(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range s.Fields {
			out = append(out, f.Field)
		}
		return out
	}
	if got := fields(); len(got) != 2 || got[0] != "u" || got[1] != "v" {
		t.Fatalf("fields %v, want [u v]", got)
	}
	if st.walked > 4 { // db/cpu's two, db/cpu2's one, and the key past them
		t.Fatalf("walked %d entries for a measurement of two", st.walked)
	}
	walked := st.walked
	fields()
	if st.walked != walked {
		t.Fatalf("asked again with no change, the replica walked %d entries more", st.walked-walked)
	}
	if _, err := st.MergeEntry(catalog.Entry{Key: "db/cpu,host=a#v", Deleted: 2}); err != nil {
		t.Fatal(err)
	}
	if got := fields(); len(got) != 1 || got[0] != "u" {
		t.Fatalf("after a delete, fields %v, want [u]", got)
	}
	if _, err := l.Shape(ctx, catalog.ShapeQuery{Prefix: "other/cpu", DB: "db"}); err == nil {
		t.Fatal("a prefix outside the database was answered")
	}
}
