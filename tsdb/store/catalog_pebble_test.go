package store

import (
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestPebbleCatalogSurvivesReopen checks that entries, postings and tombstones are on
// disk, that deletes keep the counters exact, and that retention drops a quantum's
// tombstones with its points.
func TestPebbleCatalogSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(SyncAlways)
	o.EnforceInterval = -1
	p := openTest(t, dir, o)
	e := catalog.Entry{Key: "pmu/f", Type: series.Float, Created: 3, MetaVersion: 4, Unit: "Hz",
		Tags: []catalog.Tag{{K: "bus", V: "3"}}}
	if _, err := p.MergeEntry(e); err != nil {
		t.Fatal(err)
	}
	tag := catalog.Tag{K: "bus", V: "3"}
	if err := p.MergePostings(tag, []catalog.Member{{Key: "pmu/f", Version: 3}}); err != nil {
		t.Fatal(err)
	}
	old := (time.Now().Add(-2*time.Hour).Unix() / 10) * 10
	recent := (time.Now().Unix() / 10) * 10
	for _, s := range []int64{old, recent} {
		var pts series.Points
		for i := range 10 {
			pts.AppendFloat(s*1e9+int64(i)*1e8, float64(i))
		}
		if err := p.Append(qref("pmu/f", s), "pmu/f", pts); err != nil {
			t.Fatal(err)
		}
		if n, err := p.DeleteRange(qref("pmu/f", s), "pmu/f", s*1e9, s*1e9+5e8); err != nil || n != 5 {
			t.Fatalf("DeleteRange: %d %v", n, err)
		}
	}
	wantExact(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	o.Retention = time.Hour
	p = openTest(t, dir, o)
	defer p.Close()
	got, ok, err := p.Entry("pmu/f")
	if err != nil || !ok || !catalog.Equal(got, e) {
		t.Fatalf("entry after reopen: %+v %v %v", got, ok, err)
	}
	ms, err := p.Postings(tag, "", 10)
	if err != nil || len(ms) != 1 || ms[0].Key != "pmu/f" {
		t.Fatalf("postings after reopen: %v %v", ms, err)
	}
	for _, s := range []int64{old, recent} {
		if rs, err := p.Tombstones(qref("pmu/f", s), "pmu/f"); err != nil || len(rs) != 1 {
			t.Fatalf("tombstones after reopen: %v %v", rs, err)
		}
	}
	if st := p.Stats(); st.Points != 10 || st.Shards != 2 {
		t.Fatalf("stats after reopen: %+v", st)
	}
	if _, err := p.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	if rs, _ := p.Tombstones(qref("pmu/f", old), "pmu/f"); len(rs) != 0 {
		t.Fatalf("retention kept the tombstones of a dropped quantum: %v", rs)
	}
	if rs, _ := p.Tombstones(qref("pmu/f", recent), "pmu/f"); len(rs) != 1 {
		t.Fatalf("retention dropped a recent quantum's tombstones: %v", rs)
	}
	wantExact(t, p)
}

func TestDecodeRangesRefusesCorruption(t *testing.T) {
	good := encodeRanges([]Range{{1, 5}, {7, 9}})
	if rs, err := decodeRanges(good); err != nil || len(rs) != 2 {
		t.Fatalf("%v %v", rs, err)
	}
	for _, bad := range [][]byte{nil, {0xff, 0xff, 0xff, 0x0f}, good[:len(good)-1], append(good, 0), encodeRanges([]Range{{5, 5}})} {
		if _, err := decodeRanges(bad); err == nil {
			t.Errorf("decodeRanges(%x) accepted", bad)
		}
	}
}

// TestPebbleMergeEntriesAsOneByOne checks that merging entries at once stores what
// merging them one by one (on a memory store) does, a key named twice included, that
// an invalid entry refuses the whole call, and that the entries survive a reopen.
func TestPebbleMergeEntriesAsOneByOne(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(SyncAlways)
	p := openTest(t, dir, o)
	m := NewMem()
	defer m.Close()
	base := catalog.Entry{Key: "a", Type: series.Float, Created: 5, HasBounds: true, First: 0, Last: 3599}
	if _, err := p.MergeEntry(base); err != nil {
		t.Fatal(err)
	}
	if _, err := m.MergeEntry(base); err != nil {
		t.Fatal(err)
	}
	es := []catalog.Entry{
		{Key: "a", Type: series.Float, Created: 5, HasBounds: true, First: 0, Last: 3599, HasNewest: true, Newest: 100},
		{Key: "b", Type: series.Int, Created: 6, HasBounds: true, First: 3600, Last: 7199},
		{Key: "a", Type: series.Float, Created: 5, HasBounds: true, First: 0, Last: 7199, HasNewest: true, Newest: 50},
	}
	got, err := p.MergeEntries(es)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		want, err := m.MergeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if !catalog.Equal(got[i], want) {
			t.Fatalf("entry %d: MergeEntries gave %+v, one by one %+v", i, got[i], want)
		}
	}
	if got[2].Newest != 100 || got[2].Last != 7199 {
		t.Fatalf("the second entry of a did not merge into the first: %+v", got[2])
	}
	bad := []catalog.Entry{{Key: "c", Type: series.Float, Created: 7}, {Key: ""}}
	if _, err := p.MergeEntries(bad); err == nil {
		t.Fatal("MergeEntries took an invalid entry")
	}
	if _, ok, _ := p.Entry("c"); ok {
		t.Fatal("MergeEntries stored part of a call it refused")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, o)
	defer p.Close()
	for _, k := range []string{"a", "b"} {
		want, _, _ := m.Entry(k)
		if e, ok, err := p.Entry(k); err != nil || !ok || !catalog.Equal(e, want) {
			t.Fatalf("entry %s after reopen: %+v %v %v, want %+v", k, e, ok, err, want)
		}
	}
}

// MergePostingsMany leaves every list as merging each list one by one would (a tag in
// two lists, a member named twice), stores nothing of a call it refuses, and what it
// stored survives a reopen.
func TestPebbleMergePostingsManyAsOneByOne(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(SyncAlways)
	p := openTest(t, dir, o)
	m := NewMem()
	defer m.Close()
	a, b := catalog.Tag{K: "bus", V: "1"}, catalog.Tag{K: "bus", V: "2"}
	lists := []catalog.TagMembers{
		{Tag: a, Members: []catalog.Member{{Key: "x", Version: 5}, {Key: "y", Version: 2}}},
		{Tag: b, Members: []catalog.Member{{Key: "x", Version: 1}}},
		{Tag: a, Members: []catalog.Member{{Key: "x", Version: 3}, {Key: "y", Version: 4, Removed: true}, {Key: "z", Version: 1}}},
	}
	if err := p.MergePostingsMany(lists); err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		if err := m.MergePostings(l.Tag, l.Members); err != nil {
			t.Fatal(err)
		}
	}
	bad := []catalog.TagMembers{{Tag: b, Members: []catalog.Member{{Key: "w", Version: 1}}}, {Tag: catalog.Tag{K: "", V: "v"}, Members: []catalog.Member{{Key: "w", Version: 1}}}}
	if err := p.MergePostingsMany(bad); err == nil {
		t.Fatal("MergePostingsMany took an invalid tag")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, o)
	defer p.Close()
	for _, tag := range []catalog.Tag{a, b} {
		got, err := p.Postings(tag, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := m.Postings(tag, "", 100)
		if len(got) != len(want) {
			t.Fatalf("%s: %v, one by one %v", tag, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: %v, one by one %v", tag, got, want)
			}
		}
	}
	if got, _ := p.Postings(a, "", 100); len(got) != 3 || got[0].Version != 5 || !got[1].Removed {
		t.Fatalf("%s: %v: want x at 5, y removed at 4, z", a, got)
	}
}
