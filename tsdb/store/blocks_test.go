package store

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestPebbleBlocksMatchModel appends random, overlapping, out-of-order batches, seals
// part of the way through, and after every step compares random reads with the
// in-memory store fed the same batches: whichever blocks and chunks a timestamp ended
// up in, the value last written wins.
func TestPebbleBlocksMatchModel(t *testing.T) {
	o := testOptions(SyncNone)
	o.ChunkMaxPoints = 7 // batches of up to 40 points span several blocks
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	model := NewMem()
	rnd := rand.New(rand.NewPCG(7, 11))
	t0 := testStart * 1e9
	readBack := func(step int) {
		t.Helper()
		for range 5 {
			from := t0 + rnd.Int64N(120) - 10
			to := from + rnd.Int64N(130)
			got, gotHeld, err := p.Read(testRef, "k", from, to)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			want, wantHeld, _ := model.Read(testRef, "k", from, to)
			if gotHeld != wantHeld {
				t.Fatalf("step %d: held %v, model %v", step, gotHeld, wantHeld)
			}
			assertSame(t, got, want)
		}
	}
	for step := range 200 {
		var pts series.Points
		for range 1 + rnd.IntN(40) {
			pts.AppendInt(t0+rnd.Int64N(100), int64(step*1000+rnd.IntN(1000)))
		}
		if err := p.Append(testRef, "k", pts); err != nil {
			t.Fatal(err)
		}
		if err := model.Append(testRef, "k", pts); err != nil {
			t.Fatal(err)
		}
		if step%50 == 49 {
			if _, err := p.SealNow(time.Unix(testStart+3600, 0)); err != nil {
				t.Fatal(err)
			}
		}
		readBack(step)
	}
	if got, want := p.Stats().Points, model.Stats().Points; got != want {
		t.Fatalf("Stats.Points = %d, model %d", got, want)
	}
}

// TestPebbleAppendIsOneBlock: a batch is stored as one key however many points it has,
// up to ChunkMaxPoints, and split beyond.
func TestPebbleAppendIsOneBlock(t *testing.T) {
	o := unbuffered(SyncNone)
	o.ChunkMaxPoints = 100
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	var pts series.Points
	for i := range 250 {
		pts.AppendFloat(testStart*1e9+int64(i)*16_666_667, 60+float64(i%7)/100)
	}
	id := pairID(testRef, "k")
	for _, c := range []struct{ n, blocks int }{{1, 1}, {100, 2}, {250, 5}} {
		if err := p.Append(testRef, "k", pts.Slice(0, c.n)); err != nil {
			t.Fatal(err)
		}
		if got := countKeys(t, p, id, kindBlock); got != c.blocks {
			t.Fatalf("after a batch of %d: %d blocks, want %d", c.n, got, c.blocks)
		}
	}
	got, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	assertSame(t, got, pts)
}

// TestPebbleRefusesOtherFormat: a directory written by format 1 (one key per point, no
// format stamp) or by a future format is refused with a message that says so, not
// misread.
func TestPebbleRefusesOtherFormat(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(db *pebble.DB) error
		want  string
	}{
		{"format 1", func(db *pebble.DB) error {
			return db.Set(pointKey(nil, pairID(testRef, "k"), kindBlock, testStart*1e9), []byte{byte(series.Float), 0, 0, 0, 0, 0, 0, 0, 0}, pebble.Sync)
		}, "format 1"},
		{"future format", func(db *pebble.DB) error {
			return db.Set(formatKey, []byte{9}, pebble.Sync)
		}, "format 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(SyncNone).withDefaults()
			po := o.pebbleOptions()
			defer po.Cache.Unref()
			db, err := pebble.Open(dir, po)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.setup(db); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			p, err := OpenPebble(dir, testOptions(SyncNone))
			if err == nil {
				p.Close()
				t.Fatal("opened a store in another format")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q should name %q and the directory", err, c.want)
			}
		})
	}
	// A fresh store is stamped, and opens again.
	dir := t.TempDir()
	openTest(t, dir, testOptions(SyncNone)).Close()
	openTest(t, dir, testOptions(SyncNone)).Close()
}

// TestPebbleFoldsSmallBlocks: a quantum written one point at a time is folded as it
// goes, so reads decode a few blocks, not one per write, and full blocks are not
// rewritten again.
func TestPebbleFoldsSmallBlocks(t *testing.T) {
	o := testOptions(SyncNone)
	o.ChunkMaxPoints = 100
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	var want series.Points
	for i := range 1000 {
		var one series.Points
		one.AppendFloat(testStart*1e9+int64(i)*16_666_667, float64(i))
		if err := p.Append(testRef, "k", one); err != nil {
			t.Fatal(err)
		}
		want = series.Merge(want, one)
	}
	// Overwrite a point in a full block and one in the tail.
	var fix series.Points
	fix.AppendFloat(want.T[5], -5)
	fix.AppendFloat(want.T[995], -995)
	if err := p.Append(testRef, "k", fix); err != nil {
		t.Fatal(err)
	}
	want = series.Merge(want, fix)
	blocks := countKeys(t, p, pairID(testRef, "k"), kindBlock)
	if limit := 1000/o.ChunkMaxPoints + foldTail; blocks > limit {
		t.Fatalf("%d blocks after 1001 appends; want at most %d", blocks, limit)
	}
	got, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	assertSame(t, got, want)
	if st := p.Stats(); st.Points != 1000 {
		t.Fatalf("Stats.Points = %d, want 1000", st.Points)
	}
}
