package rollup

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// knownOf reads [from, to) of level width from r and returns its known ranges.
func knownOf(t *testing.T, r *Homes, key string, width, from, to int64) []int64 {
	t.Helper()
	resp, err := r.Read(&wire.RollupReadReq{Key: key, Width: width, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Known
}

// A home keeps its windows and its marks in the store: after a restart (a new
// rollups over the reopened store) it vouches for what it vouched for before, and
// still not for a window a late write marked.
func TestRollupHomeRestartKeepsWindowsAndMarks(t *testing.T) {
	dir := t.TempDir()
	open := func() *store.Pebble {
		st, err := store.OpenPebble(dir, store.PebbleOptions{Sync: store.SyncAlways, SealInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	cfg := Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	min := int64(time.Minute)
	st := open()
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: st})
	knownOf(t, r, "k", min, 0, 10*min) // adopts k
	s := r.series["k"]
	s.started, s.typ, s.from, s.front = true, series.Float, 0, 10*min
	if err := st.UpdateRollups(store.RollupUpdate{Key: "k", Head: s.head(r.print),
		Put: []store.RollupRecord{{Start: 2 * min, Value: windowValue(agg.Partial{Type: series.Float, Count: 1, Min: 1, Max: 1, Sum: 1, Hash: 9})}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mark(&wire.RollupMarkReq{Key: "k", Starts: []int64{5*min + 1}}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]int64{0, 5 * min, 6 * min, 10 * min})
	if got := fmt.Sprint(knownOf(t, r, "k", min, 0, 10*min)); got != want {
		t.Fatalf("before the restart: known %s, want %s", got, want)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer st.Close()
	r = NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: st})
	if len(r.series) != 1 || r.series["k"] == nil || r.series["k"].dirty[5*min] == 0 {
		t.Fatalf("after the restart the home holds %d series, k's marks %v", len(r.series), r.series["k"])
	}
	resp, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: 10 * min})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(resp.Known); got != want {
		t.Fatalf("after the restart: known %s, want %s", got, want)
	}
	_, ws, err := agg.DecodeWindowsWire(resp.Packed)
	if err != nil || len(ws) != 1 || ws[0].Start != 2*min || ws[0].Count != 1 || ws[0].Hash != 9 {
		t.Fatalf("after the restart: windows %+v, %v", ws, err)
	}
	// A home started with other levels drops what it cannot read right.
	other := Config{Levels: []time.Duration{time.Minute, time.Hour}}.WithDefaults(quanta.Quantum(10))
	r = NewHomes(other, nil, Options{Quantum: quanta.Quantum(10), Store: st})
	if len(r.series) != 0 || r.dropped.Load() != 1 {
		t.Fatalf("levels changed: %d series kept, %d dropped", len(r.series), r.dropped.Load())
	}
	if _, ok, _ := st.RollupHead("k"); ok {
		t.Fatal("levels changed: the old head is still stored")
	}
}

// What a home holds in memory is bounded: MaxSeries series, MaxMarks marked windows
// per series. Past MaxMarks the home pulls from the oldest mark again (it vouches for
// nothing from there), instead of holding more.
func TestRollupHomeMemoryBounded(t *testing.T) {
	cfg := Config{MaxSeries: 3, MaxMarks: 100, Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: store.NewMem()})
	min := int64(time.Minute)
	for i := range 5 {
		knownOf(t, r, fmt.Sprint("k", i), min, 0, min)
	}
	if len(r.series) != 3 {
		t.Fatalf("%d series held, MaxSeries 3", len(r.series))
	}
	s := r.series["k0"]
	s.started, s.from, s.front = true, 0, 10000*min
	for round := range 5 {
		starts := make([]int64, 0, 60)
		for i := range 60 {
			starts = append(starts, int64(1000+round*60+i)*min)
		}
		if _, err := r.Mark(&wire.RollupMarkReq{Key: "k0", Starts: starts}); err != nil {
			t.Fatal(err)
		}
		if n := len(s.dirty) + len(s.unsettled); n > cfg.MaxMarks {
			t.Fatalf("round %d: %d marks held, MaxMarks %d", round, n, cfg.MaxMarks)
		}
	}
	// The first mark that went over rewound the front to the oldest mark.
	if s.front != 1000*min {
		t.Fatalf("front at minute %d after going over MaxMarks, want 1000", s.front/min)
	}
	if k := knownOf(t, r, "k0", min, 990*min, 1400*min); fmt.Sprint(k) != fmt.Sprint([]int64{990 * min, 1000 * min}) {
		t.Fatalf("known after the rewind: %v, want [990, 1000) min", k)
	}
}

// A window past its level's retention is not vouched for, and the sweep deletes it;
// the coarser level, kept longer, still answers.
func TestRollupRetentionPerLevel(t *testing.T) {
	cfg := Config{Retention: []time.Duration{48 * time.Hour, 0, 0}}.WithDefaults(quanta.Quantum(10))
	st := store.NewMem()
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: st})
	day, hour, min := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	t0 := agg.WindowStart(time.Now().UnixNano(), day) - 10*day
	knownOf(t, r, "k", min, t0, t0+min)
	s := r.series["k"]
	s.started, s.from, s.front = true, t0, t0+day
	p := agg.Partial{Type: series.Float, Count: 1, Hash: 3}
	if err := st.UpdateRollups(store.RollupUpdate{Key: "k", Put: []store.RollupRecord{
		{Level: 0, Start: t0, Value: windowValue(p)}, {Level: 1, Start: t0, Value: windowValue(p)}}}); err != nil {
		t.Fatal(err)
	}
	if k := knownOf(t, r, "k", min, t0, t0+hour); len(k) != 0 {
		t.Fatalf("minutes 10 days old with a 2-day retention: known %v", k)
	}
	if k := knownOf(t, r, "k", hour, t0, t0+hour); fmt.Sprint(k) != fmt.Sprint([]int64{t0, t0 + hour}) {
		t.Fatalf("hours kept forever: known %v", k)
	}
	r.sweep("k")
	var left []int64
	st.RollupRecords("k", 0, math.MinInt64, math.MaxInt64, func(s int64, _ []byte) bool { left = append(left, s); return true })
	if len(left) != 0 {
		t.Fatalf("the sweep left minutes past their retention: %v", left)
	}
	if k := knownOf(t, r, "k", hour, t0, t0+hour); len(k) != 2 {
		t.Fatalf("the sweep took the hours too: known %v", k)
	}
}
