package uplink

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func TestCursorRecordRoundTrip(t *testing.T) {
	r := cursorRecord{Cursor: 5_000, From: 1_000, Counts: map[int64]int64{1_000: 3, 2_000: 0, 4_000: 60}}
	got, err := decodeCursor(r.encode(1_000))
	if err != nil || got.Cursor != r.Cursor || got.From != r.From || !maps.Equal(got.Counts, r.Counts) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
	}
	// Too many windows: the newest are kept, and From says where they start.
	many := cursorRecord{Cursor: 1_000_000, From: 0, Counts: map[int64]int64{}}
	for w := int64(0); w < 1_000_000; w += 1_000 {
		many.Counts[w] = 1
	}
	got, err = decodeCursor(many.encode(1_000))
	if err != nil || len(got.Counts) != maxCursorWindows || got.From != 1_000_000-maxCursorWindows*1_000 {
		t.Fatalf("%d windows from %d (%v)", len(got.Counts), got.From, err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("1 5000 1000 1000:3 4000:60")
	f.Add("1 0 0")
	f.Add("2 0 0")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeCursor(s)
		if err != nil {
			return
		}
		again, err := decodeCursor(r.encode(1))
		if err != nil {
			t.Fatalf("%q decodes, but its encoding does not: %v", s, err)
		}
		if again.Cursor != r.Cursor {
			t.Fatalf("%q: cursor %d, then %d", s, r.Cursor, again.Cursor)
		}
	})
}

// TestCursorSeriesSpansManySaves: a cursor saved every 10 s lives in a series whose
// quantum holds hundreds of saves, so that its saves append to one shard instead of
// each making (and the store sealing) a shard of its own.
func TestCursorSeriesSpansManySaves(t *testing.T) {
	ctx := context.Background()
	lc, target, url := startOne(t)
	const key = "site/pmu1/freq"
	var p series.Points
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 60 {
		p.AppendFloat(base.Add(time.Duration(i)*time.Second).UnixNano(), float64(i))
	}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := quickConfig(url)
	cfg.SaveEvery = 10 * time.Second
	ups := runUplinks(t, lc, cfg, func(_ int, n *tsdb.Node) Own { return n.Coordinator() })
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 60 }, "the 60 points to be forwarded")
	ups[0].Close() // saves the cursor
	ck := CursorKey(ups[0].id, key)
	q := lc.Nodes[0].Coordinator().SeriesQuantumForTest(ctx, ck)
	if q.Duration()/cfg.SaveEvery < 300 {
		t.Errorf("the cursor series has a quantum of %v: %d saves a shard, want at least 300", q.Duration(), q.Duration()/cfg.SaveEvery)
	}
	got, err := lc.Nodes[0].Coordinator().Latest(ctx, ck, 0, time.Now().Add(time.Minute).UnixNano())
	if err != nil || got.Len() != 1 {
		t.Fatalf("the saved cursor: %v points, %v", got.Len(), err)
	}
	if rec, err := decodeCursor(got.S[0]); err != nil || rec.Cursor <= p.T[59] {
		t.Errorf("the saved cursor %+v (%v) does not pass the last point forwarded, %d", rec, err, p.T[59])
	}
}
