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
