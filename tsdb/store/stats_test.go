package store

import (
	"testing"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// A pair summary written before statistics were kept loads, gets its statistics from
// its points, and keeps them from its next append on.
func TestStatsOfAnOldSummary(t *testing.T) {
	dir := t.TempDir()
	p := openTest(t, dir, testOptions(SyncNone))
	ref := ShardRef{ID: quanta.ShardID(quanta.KFI, "old", 1_700_000_000), Start: 1_700_000_000}
	base := int64(1_700_000_000) * 1e9
	pts := series.Points{Type: series.Float, T: []int64{base + 1, base + 2, base + 3}, F: []float64{3, 1, 2}}
	if err := p.Append(ref, "old", pts); err != nil {
		t.Fatal(err)
	}
	// Rewrite the summary as the format before statistics had it.
	id := pairID(ref, "old")
	s, err := p.summary(id, string(id))
	if err != nil || !s.hasStats {
		t.Fatalf("summary: %+v, %v", s, err)
	}
	s.hasStats, s.stats = false, agg.Partial{}
	if err := p.db.Set(pairKey(nil, id, kindSummary), s.encode(), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, testOptions(SyncNone))
	defer p.Close()
	if s, err := p.summary(id, string(id)); err != nil || s.hasStats || s.count != 3 {
		t.Fatalf("old summary: %+v, %v", s, err)
	}
	// The batch reads it with its iterator, and computes its statistics as PairStats does.
	absent := ShardRef{ID: quanta.ShardID(quanta.KFI, "old", 1_700_000_010), Start: 1_700_000_010}
	var batch []agg.Partial
	err = p.AggregateBatch([]PairAgg{{Ref: ref, Key: "old"}, {Ref: absent, Key: "old"}}, func(i int, st agg.Partial, held bool, _ []agg.Window) error {
		if held != (i == 0) {
			t.Errorf("batch: shard %d held %v", i, held)
		}
		batch = append(batch, st)
		return nil
	})
	if err != nil || len(batch) != 2 || batch[0].Count != 3 || batch[0].Min != 1 || batch[0].Hash != agg.PointsHash(&pts, 0, 3) {
		t.Fatalf("batch stats of an old summary: %+v, %v", batch, err)
	}
	p.pairs = newPairTable(16) // the batch cached what it computed: read the record again
	st, held, err := p.PairStats(ref, "old")
	if err != nil || !held || st.Count != 3 || st.Min != 1 || st.Max != 3 || st.Hash != agg.PointsHash(&pts, 0, 3) {
		t.Fatalf("stats of an old summary: %+v, held %v, %v", st, held, err)
	}
	if err := p.Append(ref, "old", series.Points{Type: series.Float, T: []int64{base + 4}, F: []float64{-1}}); err != nil {
		t.Fatal(err)
	}
	p.pairs = newPairTable(16) // read the record, not the cache
	err = p.AggregateBatch([]PairAgg{{Ref: absent, Key: "old"}, {Ref: ref, Key: "old"}}, func(i int, st agg.Partial, held bool, _ []agg.Window) error {
		if i == 1 && (!held || st.Count != 4 || st.Min != -1) {
			t.Errorf("batch from the record: %+v, held %v", st, held)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err = p.summary(id, string(id))
	if err != nil || !s.hasStats || s.stats.Count != 4 || s.stats.Min != -1 || s.stats.Sum+s.stats.Comp != 5 {
		t.Fatalf("after an append: %+v, %v", s, err)
	}
}
