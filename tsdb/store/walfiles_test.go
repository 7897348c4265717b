package store

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/series"
)

// walFiles returns the WAL files in dir with their sizes and allocated bytes.
func walFiles(t *testing.T, dir string) (names []string, size, alloc int64) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		info, err := os.Stat(l)
		if err != nil {
			continue // deleted meanwhile
		}
		names = append(names, filepath.Base(l))
		size += info.Size()
		alloc += info.Sys().(*syscall.Stat_t).Blocks * 512
	}
	return names, size, alloc
}

// TestWALHoldsOnlyWhatItMust checks walfiles.go: pebble neither preallocates a WAL
// file's blocks nor keeps finished WAL files for reuse, so the WAL's disk footprint is
// the records not yet flushed and not a multiple of MemTableSize.
func TestWALHoldsOnlyWhatItMust(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(SyncAlways)
	o.MemTableSize = 1 << 20
	p := openTest(t, dir, o)
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := testStart * 1e9
	write := func(round int) {
		pts := series.Points{Type: series.Float}
		for i := range 500 {
			pts.T = append(pts.T, t0+int64(round*500+i))
			pts.F = append(pts.F, rng.Float64())
		}
		if err := p.Append(testRef, "k", pts); err != nil {
			t.Fatal(err)
		}
	}
	// A few KiB of records: a preallocated WAL file would take 1.1 MiB.
	write(0)
	names, size, alloc := walFiles(t, dir)
	if limit := size + 64<<10; alloc > limit {
		t.Fatalf("WAL files %v hold %d bytes but take %d on disk (want ≤ %d): preallocated", names, size, alloc, limit)
	}
	// Every flush finishes a WAL file; none is kept for reuse, so once pebble's
	// cleaner has run only the live one is left.
	for round := 1; round <= 6; round++ {
		write(round)
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if !testutil.Poll(10*time.Second, func() bool {
		names, size, alloc = walFiles(t, dir)
		return len(names) == 1 && alloc <= size+64<<10
	}) {
		t.Fatalf("after 6 flushes: WAL files %v, %d bytes, %d on disk; want the live one only, not preallocated", names, size, alloc)
	}
}

// TestIdleFlushEmptiesWAL checks idleflush.go: a sealer pass that follows writes
// leaves them in the WAL; the next pass without writes flushes them, so the WAL on
// disk goes to nothing, and the points are still there.
func TestIdleFlushEmptiesWAL(t *testing.T) {
	dir := t.TempDir()
	p := openTest(t, dir, testOptions(SyncAlways))
	defer p.Close()
	t0 := testStart * 1e9
	pts := series.Points{Type: series.Float}
	for i := range 1000 {
		pts.T = append(pts.T, t0+int64(i))
		pts.F = append(pts.F, float64(i)/7)
	}
	if err := p.Append(testRef, "k", pts); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(testStart, 0) // the quantum has not ended: nothing to seal
	if err := p.sealAll(now); err != nil {
		t.Fatal(err)
	}
	if names, size, _ := walFiles(t, dir); size == 0 {
		t.Fatalf("a pass right after writes flushed them (WAL files %v empty)", names)
	}
	if err := p.sealAll(now); err != nil {
		t.Fatal(err)
	}
	var names []string
	var size, alloc int64
	if !testutil.Poll(10*time.Second, func() bool {
		names, size, alloc = walFiles(t, dir)
		return size == 0 && alloc == 0
	}) {
		t.Fatalf("after an idle pass: WAL files %v hold %d bytes (%d on disk), want none", names, size, alloc)
	}
	got, held, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
	if err != nil || !held || got.Len() != pts.Len() {
		t.Fatalf("after the idle flush: %d points, held %v, err %v; want %d", got.Len(), held, err, pts.Len())
	}
}
