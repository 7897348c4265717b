package storetest

import (
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Postings and entries merged together (store.CatalogMerger), for a store that can.
func init() { cases = append(cases, catalogMergeCases...) }

var catalogMergeCases = []testCase{
	{"MergeCatalogEqualsPostingsThenEntries", func(t *testing.T, s store.Store, _ func()) {
		c := asCatalog(t, s)
		cm, ok := c.(store.CatalogMerger)
		if !ok {
			t.Skipf("%T does not merge postings and entries together", s)
		}
		old := catalog.Entry{Key: "db/m,h=a#f", Type: series.Float, Created: 3, HasBounds: true, First: 0, Last: 10}
		if _, err := c.MergeEntry(old); err != nil {
			t.Fatal(err)
		}
		wider := old
		wider.Last = 20
		fresh := catalog.Entry{Key: "db/m,h=b#f", Type: series.Int, Created: 5, Tags: []catalog.Tag{{K: "h", V: "b"}}, MetaVersion: 5}
		h := catalog.Tag{K: "h", V: "b"}
		lists := []catalog.TagMembers{
			{Tag: h, Members: []catalog.Member{{Key: fresh.Key, Version: 5}}},
			{Tag: h, Members: []catalog.Member{{Key: fresh.Key, Version: 4}}}, // a tag twice: merged
		}
		out, err := cm.MergeCatalog(lists, []catalog.Entry{wider, fresh, fresh})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 3 || out[0].Last != 20 || out[0].First != 0 || !catalog.Equal(out[1], fresh) || !catalog.Equal(out[2], fresh) {
			t.Fatalf("merged entries %+v; want %q widened to 20 and %q as written, twice", out, old.Key, fresh.Key)
		}
		for _, e := range out {
			if got, ok, err := c.Entry(e.Key); err != nil || !ok || !catalog.Equal(got, e) {
				t.Errorf("Entry(%q) = %+v, %v, %v; want %+v", e.Key, got, ok, err, e)
			}
		}
		ms, err := c.Postings(h, "", 10)
		if err != nil || len(ms) != 1 || ms[0].Key != fresh.Key || ms[0].Version != 5 {
			t.Errorf("postings of %s = %+v, %v; want %q at version 5", h, ms, err, fresh.Key)
		}
		// Nothing to merge: nothing changes, no error.
		if out, err := cm.MergeCatalog(nil, nil); err != nil || len(out) != 0 {
			t.Errorf("an empty merge: %+v, %v", out, err)
		}
		// A refused member refuses the whole merge: the entry beside it is not stored.
		lone := catalog.Entry{Key: "db/m,h=c#f", Type: series.Float, Created: 6}
		bad := []catalog.TagMembers{{Tag: catalog.Tag{K: "h", V: "c"}, Members: []catalog.Member{{Key: "", Version: 6}}}}
		if _, err := cm.MergeCatalog(bad, []catalog.Entry{lone}); err == nil {
			t.Error("a merge with an empty member key was accepted")
		}
		if _, ok, _ := c.Entry(lone.Key); ok {
			t.Error("a refused merge stored its entry")
		}
	}},
}
