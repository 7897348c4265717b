package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

func init() { cases = append(cases, catalogCases...) }

func asCatalog(t *testing.T, s store.Store) store.Catalog {
	t.Helper()
	c, ok := s.(store.Catalog)
	if !ok {
		t.Fatalf("%T does not implement store.Catalog", s)
	}
	return c
}

func asDeleter(t *testing.T, s store.Store) store.Deleter {
	t.Helper()
	d, ok := s.(store.Deleter)
	if !ok {
		t.Fatalf("%T does not implement store.Deleter", s)
	}
	return d
}

var catalogCases = []testCase{
	{"CatalogEntriesVersion", func(t *testing.T, s store.Store, _ func()) {
		c := asCatalog(t, s)
		vs, ok := c.(store.EntriesVersioner)
		if !ok {
			t.Skipf("%T does not count its entries' changes", s)
		}
		e := catalog.Entry{Key: "db/m#f", Type: series.Float, Created: 3, HasBounds: true, First: 1, Last: 2}
		v0 := vs.EntriesVersion()
		if _, err := c.MergeEntry(e); err != nil {
			t.Fatal(err)
		}
		v1 := vs.EntriesVersion()
		if v1 <= v0 {
			t.Fatalf("a new entry left the version at %d (was %d)", v1, v0)
		}
		wider := e
		wider.Last = 9
		both := []catalog.Entry{wider, {Key: "db/m#g", Type: series.Int, Created: 3}}
		if em, ok := c.(store.EntriesMerger); ok {
			if _, err := em.MergeEntries(both); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, e := range both {
				if _, err := c.MergeEntry(e); err != nil {
					t.Fatal(err)
				}
			}
		}
		v2 := vs.EntriesVersion()
		if v2 <= v1 {
			t.Fatalf("widened bounds left the version at %d (was %d)", v2, v1)
		}
		var seen int
		if err := c.Entries("db/m", func(catalog.Entry) bool { seen++; return true }); err != nil || seen != 2 {
			t.Fatalf("Entries after the version moved: %d entries, %v", seen, err)
		}
	}},
	{"CatalogEntriesMerge", func(t *testing.T, s store.Store, _ func()) {
		c := asCatalog(t, s)
		if _, ok, err := c.Entry("pmu/f"); ok || err != nil {
			t.Fatalf("Entry of an unknown series: %v %v", ok, err)
		}
		created := catalog.Entry{Key: "pmu/f", Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9}
		if _, err := c.MergeEntry(created); err != nil {
			t.Fatal(err)
		}
		meta := catalog.Entry{Key: "pmu/f", MetaVersion: 11, Unit: "Hz", Tags: []catalog.Tag{{K: "bus", V: "3"}}}
		got, err := c.MergeEntry(meta)
		if err != nil {
			t.Fatal(err)
		}
		stored, ok, err := c.Entry("pmu/f")
		if err != nil || !ok || !catalog.Equal(stored, got) || !stored.Live() || stored.Unit != "Hz" || stored.Last != 9 {
			t.Fatalf("Entry after two merges: %+v (%v, %v); MergeEntry said %+v", stored, ok, err, got)
		}
		// An older copy changes nothing.
		if again, _ := c.MergeEntry(created); !catalog.Equal(again, stored) {
			t.Fatalf("an older copy changed the entry: %+v", again)
		}
		if _, err := c.MergeEntry(catalog.Entry{Key: "bad", Unit: "V"}); err == nil {
			t.Fatal("an entry with metadata but no version was accepted")
		}
		for _, k := range []string{"a", "c", "b"} {
			if _, err := c.MergeEntry(catalog.Entry{Key: k, Type: series.Int, Created: 1}); err != nil {
				t.Fatal(err)
			}
		}
		var keys []string
		if err := c.Entries("a", func(e catalog.Entry) bool { keys = append(keys, e.Key); return len(keys) < 3 }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(keys) != "[b c pmu/f]" {
			t.Fatalf("Entries after a: %v", keys)
		}
	}},
	{"CatalogPostingsPageAndMerge", func(t *testing.T, s store.Store, _ func()) {
		c := asCatalog(t, s)
		bus := catalog.Tag{K: "bus", V: "3"}
		var ms []catalog.Member
		for i := 0; i < 25; i++ {
			ms = append(ms, catalog.Member{Key: fmt.Sprintf("s%02d", i), Version: 5})
		}
		if err := c.MergePostings(bus, ms); err != nil {
			t.Fatal(err)
		}
		// A removal at the same version wins; an older add loses to it.
		if err := c.MergePostings(bus, []catalog.Member{{Key: "s03", Version: 5, Removed: true}, {Key: "s04", Version: 4}}); err != nil {
			t.Fatal(err)
		}
		other := catalog.Tag{K: "bus", V: "30"} // a value sharing a prefix with bus=3
		if err := c.MergePostings(other, []catalog.Member{{Key: "zz", Version: 1}}); err != nil {
			t.Fatal(err)
		}
		var all []catalog.Member
		for after := ""; ; {
			page, err := c.Postings(bus, after, 10)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 10 {
				break
			}
			after = page[len(page)-1].Key
		}
		if len(all) != 25 || all[0].Key != "s00" || all[24].Key != "s24" {
			t.Fatalf("paged postings: %d members %v", len(all), all)
		}
		if !all[3].Removed || all[4].Removed || all[4].Version != 5 {
			t.Fatalf("member merge: %+v %+v", all[3], all[4])
		}
		var tags []catalog.Tag
		if err := c.PostingTags(func(t catalog.Tag) bool { tags = append(tags, t); return true }); err != nil {
			t.Fatal(err)
		}
		if len(tags) != 2 {
			t.Fatalf("PostingTags: %v", tags)
		}
		// One merge naming a member several times (writers' members coalesced into one
		// request) leaves what merging them one by one would, whatever their order; the
		// members it does not name are left as they were.
		dup := []catalog.Member{{Key: "s07", Version: 9}, {Key: "s06", Version: 8, Removed: true}, {Key: "s07", Version: 6, Removed: true},
			{Key: "s06", Version: 7}, {Key: "s08", Version: 2, Removed: true}}
		if err := c.MergePostings(bus, dup); err != nil {
			t.Fatal(err)
		}
		page, err := c.Postings(bus, "s05", 4)
		if err != nil {
			t.Fatal(err)
		}
		want := []catalog.Member{{Key: "s06", Version: 8, Removed: true}, {Key: "s07", Version: 9}, {Key: "s08", Version: 5}, {Key: "s09", Version: 5}}
		if fmt.Sprint(page) != fmt.Sprint(want) {
			t.Fatalf("after one merge naming members twice: %v, want %v", page, want)
		}
		if _, err := c.Postings(bus, "", store.MaxPostingsPage+1); err == nil {
			t.Fatal("an oversized page was accepted")
		}
		if err := c.MergePostings(catalog.Tag{K: "k=", V: "v"}, ms); err == nil {
			t.Fatal("a bad tag was accepted")
		}
	}},
	{"DeleteRangeAndTombstones", func(t *testing.T, s store.Store, _ func()) {
		d := asDeleter(t, s)
		var all series.Points
		for i := int64(0); i < 10; i++ {
			all.AppendFloat(sec+i*100, float64(i))
		}
		mustAppend(t, s, refA, "k", all)
		n, err := d.DeleteRange(refA, "k", sec+200, sec+500)
		if err != nil || n != 3 {
			t.Fatalf("DeleteRange: dropped %d, %v; want 3", n, err)
		}
		got, held := readAll(t, s, refA, "k")
		wantPoints(t, got, floats(tsList(sec, sec+100, sec+500, sec+600, sec+700, sec+800, sec+900), 0, 1, 5, 6, 7, 8, 9))
		if !held {
			t.Fatal("held = false after a partial delete")
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 7})
		// Replicas' copies of deleted points are dropped; a direct new write is kept.
		kept, err := d.Restore(refA, "k", floats(tsList(sec+200, sec+300, sec+950), 2, 3, 9.5), store.RestoreOptions{})
		if err != nil || kept.Stored != 1 {
			t.Fatalf("Restore: kept %d, %v; want 1", kept, err)
		}
		// A sender that applied the same delete sends points written after it: kept.
		kept, err = d.Restore(refA, "k", floats(tsList(sec+300, sec+400), 3, 4), store.RestoreOptions{SenderDeleted: []store.Range{{From: sec + 250, To: sec + 350}}})
		if err != nil || kept.Stored != 1 {
			t.Fatalf("Restore from a sender holding part of the tombstone: kept %d, %v; want 1 (sec+300)", kept, err)
		}
		if got := mustReadAll(t, s, refA, "k"); got.Len() != 9 {
			t.Fatalf("after a restore from a sender holding the tombstone: %d points, want 9", got.Len())
		}
		if _, err := d.DeleteRange(refA, "k", sec+300, sec+301); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, refA, "k", floats(tsList(sec+250), 2.5))
		got, _ = readAll(t, s, refA, "k")
		wantPoints(t, got, floats(tsList(sec, sec+100, sec+250, sec+500, sec+600, sec+700, sec+800, sec+900, sec+950), 0, 1, 2.5, 5, 6, 7, 8, 9, 9.5))
		// Ranges merge.
		if _, err := d.DeleteRange(refA, "k", sec+500, sec+600); err != nil {
			t.Fatal(err)
		}
		rs, err := d.Tombstones(refA, "k")
		if err != nil || fmt.Sprint(rs) != fmt.Sprintf("[{%d %d}]", sec+200, sec+600) {
			t.Fatalf("Tombstones: %v %v", rs, err)
		}
		if _, err := d.DeleteRange(refA, "k", sec+5, sec+5); err == nil {
			t.Fatal("an empty delete range was accepted")
		}
		// More appends after the delete read back in order (blocks after a rewrite).
		for i := int64(0); i < 20; i++ {
			mustAppend(t, s, refA, "k", floats(tsList(sec+1000+i), float64(i)))
		}
		if got := mustReadAll(t, s, refA, "k"); got.Len() != 8+20 {
			t.Fatalf("after more appends: %d points, want 28", got.Len())
		}
	}},
	{"RestoreKeepHeldOnlyFills", func(t *testing.T, s store.Store, _ func()) {
		// Another replica's copy may be older than what this replica was written since:
		// with KeepHeld it fills the timestamps missing here and changes no value held.
		d := asDeleter(t, s)
		mustAppend(t, s, refA, "k", floats(tsList(sec, sec+100, sec+200), 0, 1, 2))
		mustAppend(t, s, refA, "k", floats(tsList(sec+100), -1)) // an overwrite
		r, err := d.Restore(refA, "k", floats(tsList(sec, sec+100, sec+150, sec+200, sec+300), 0, 1, 1.5, 2, 3),
			store.RestoreOptions{KeepHeld: true})
		if err != nil || r.Stored != 2 || r.Conflicts != 1 {
			t.Fatalf("Restore KeepHeld: %+v, %v; want 2 stored (sec+150, sec+300), 1 conflict (sec+100)", r, err)
		}
		wantPoints(t, mustReadAll(t, s, refA, "k"), floats(tsList(sec, sec+100, sec+150, sec+200, sec+300), 0, -1, 1.5, 2, 3))
		// A copy holding nothing new stores nothing.
		if r, err := d.Restore(refA, "k", floats(tsList(sec+100), 1), store.RestoreOptions{KeepHeld: true}); err != nil || r != (store.Restored{Conflicts: 1}) {
			t.Fatalf("Restore KeepHeld of a held timestamp: %+v, %v", r, err)
		}
		// Without KeepHeld the copy's values win (a hint carrying an overwrite).
		if r, err := d.Restore(refA, "k", floats(tsList(sec+100), 1), store.RestoreOptions{}); err != nil || r.Stored != 1 {
			t.Fatalf("Restore: %+v, %v", r, err)
		}
		wantPoints(t, mustReadAll(t, s, refA, "k"), floats(tsList(sec, sec+100, sec+150, sec+200, sec+300), 0, 1, 1.5, 2, 3))
	}},
	{"DeleteBeforeDataArrivesStillFilters", func(t *testing.T, s store.Store, _ func()) {
		d := asDeleter(t, s)
		if n, err := d.DeleteRange(refC, "k", sec, sec+1000*1e9); err != nil || n != 0 {
			t.Fatalf("DeleteRange of an empty pair: %d %v", n, err)
		}
		kept, err := d.Restore(refC, "k", floats(tsList(sec+10*1e9, sec+20*1e9), 1, 2), store.RestoreOptions{})
		if err != nil || kept.Stored != 0 {
			t.Fatalf("Restore under a tombstone: kept %d, %v", kept, err)
		}
		if _, held := readAll(t, s, refC, "k"); held {
			t.Fatal("a replica's copy under a tombstone was stored")
		}
		// Too many disjoint ranges are refused with a message.
		var last error
		for i := int64(0); i < store.MaxTombstones+1 && last == nil; i++ {
			_, last = d.DeleteRange(refB, "k", sec+10+i*10, sec+11+i*10)
		}
		if last == nil {
			t.Fatalf("%d disjoint ranges accepted", store.MaxTombstones+1)
		}
	}},
	{"DeleteWholeSeriesFreesItsType", func(t *testing.T, s store.Store, _ func()) {
		d := asDeleter(t, s)
		mustAppend(t, s, refA, "k", floats(tsList(sec+1, sec+2), 1, 2))
		mustAppend(t, s, refB, "k", floats(tsList(sec+10e9+1), 3))
		for _, r := range []store.ShardRef{refA, refB} {
			if _, err := d.DeleteRange(r, "k", -1<<63, 1<<63-1); err != nil {
				t.Fatal(err)
			}
			if _, held := readAll(t, s, r, "k"); held {
				t.Fatal("held = true after deleting every point")
			}
		}
		if err := d.ForgetType("k"); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.SeriesType("k"); ok {
			t.Fatal("type still known after ForgetType")
		}
		wantStats(t, s, store.Stats{})
		if _, err := s.DeclareType("k", series.String); err != nil {
			t.Fatalf("a new type after the delete: %v", err)
		}
		mustAppend(t, s, refA, "k", strs(tsList(sec+3), "open"))
		if err := s.Append(refA, "k", floats(tsList(sec+4), 1)); !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("the new type is not enforced: %v", err)
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 1})
	}},
}
