package store

import (
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/pmudata"
	"github.com/tsdht/tsdht/quanta"
)

// bulkLoad appends chans as `tsdht put` sends history: one series at a time, in
// batches of 10,000 points split by quantum. It returns the points stored.
func bulkLoad(t testing.TB, p *Pebble, chans []pmudata.Channel) int64 {
	t.Helper()
	q := p.Quantum()
	n := int64(0)
	for _, ch := range chans {
		all := ch.Points
		for i := 0; i < all.Len(); i += 10_000 {
			part := all.Slice(i, min(i+10_000, all.Len()))
			var batch []PairAppend
			for j := 0; j < part.Len(); {
				qs := q.Start(part.T[j])
				k := j
				for k < part.Len() && q.Start(part.T[k]) == qs {
					k++
				}
				ref := ShardRef{ID: quanta.ShardID(quanta.QFI, ch.Key(), qs), Start: qs}
				batch = append(batch, PairAppend{Ref: ref, Key: ch.Key(), Points: part.Slice(j, k)})
				j = k
			}
			if err := p.AppendBatch(batch); err != nil {
				t.Fatal(err)
			}
			n += int64(part.Len())
		}
	}
	return n
}

// pairBytes is what pebble's tables hold in the pair family (estimated by pebble).
func pairBytes(t testing.TB, p *Pebble) int64 {
	t.Helper()
	n, err := p.db.EstimateDiskUsage([]byte{famPair}, []byte{famPair + 1})
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

// idleTestOptions keeps pebble from compacting level 0 by itself, so that only the
// idle compaction can reclaim what the seals replaced.
func idleTestOptions() PebbleOptions {
	o := testOptions(SyncNone)
	o.MemTableSize = 256 << 10
	o.L0CompactionThreshold = 1000
	return o
}

// TestIdleCompactionReclaimsSealedBlocks checks idlecompact.go: history loaded in bulk
// reaches the tables as blocks before it is sealed; once the writes and the seals
// stop, a pass of the sealer compacts the sealed range once, which drops the blocks
// (the tables shrink), keeps every point, and is not repeated by later passes.
func TestIdleCompactionReclaimsSealedBlocks(t *testing.T) {
	cfg := pmudata.Default()
	cfg.PMUs = 1
	cfg.Duration = 20 * time.Minute
	chans := pmudata.Generate(cfg)
	p := openTest(t, t.TempDir(), idleTestOptions())
	defer p.Close()
	points := bulkLoad(t, p, chans)
	if err := p.Flush(); err != nil { // every block in a table before its seal
		t.Fatal(err)
	}
	now := cfg.Start.Add(cfg.Duration + time.Hour)
	if err := p.sealAll(now); err != nil { // seals everything
		t.Fatal(err)
	}
	if n := p.compactedWindows(); n != 0 {
		t.Fatalf("%d windows compacted by a pass that sealed: want none until writes stop", n)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	before := pairBytes(t, p)
	if err := p.sealAll(now); err != nil { // idle: flush, then compact
		t.Fatal(err)
	}
	done := p.compactedWindows()
	if done == 0 {
		t.Fatalf("the first idle pass after the seals compacted nothing (tables hold %d bytes of pairs)", before)
	}
	after := pairBytes(t, p)
	if after > before*4/5 {
		t.Fatalf("the idle compaction left %d bytes of pairs of %d: want the replaced blocks gone (at most 80 %%)", after, before)
	}
	t.Logf("%d points: %d bytes of pairs before the idle compaction (%.2f B/point), %d after (%.2f), %d windows",
		points, before, float64(before)/float64(points), after, float64(after)/float64(points), done)
	flash := p.Stats().FlashBytesWritten
	for range 5 {
		now = now.Add(10 * time.Second)
		if err := p.sealAll(now); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.compactedWindows(); n != done {
		t.Fatalf("idle passes after the compaction compacted %d more windows: want none", n-done)
	}
	if f := p.Stats().FlashBytesWritten; f != flash {
		t.Fatalf("idle passes after the compaction wrote %d bytes to flash: want none", f-flash)
	}
	var got int64
	for _, ch := range chans {
		for qs := q0(p, ch); qs <= ch.Points.T[ch.Points.Len()-1]/1e9; qs += int64(p.Quantum()) {
			ref := ShardRef{ID: quanta.ShardID(quanta.QFI, ch.Key(), qs), Start: qs}
			pts, _, err := p.Read(ref, ch.Key(), math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			got += int64(pts.Len())
		}
	}
	if got != points {
		t.Fatalf("after the idle compaction %d points read back, want %d", got, points)
	}
}

func q0(p *Pebble, ch pmudata.Channel) int64 { return p.Quantum().Start(ch.Points.T[0]) }

// TestIdleCompactionOnlyAfterReplacements checks that an idle store does no compaction
// when no seal replaced anything on disk: writes that were never sealed, and a stream
// sealed while its blocks were still in the memtable, leave the idle pass a flush only.
func TestIdleCompactionOnlyAfterReplacements(t *testing.T) {
	cfg := pmudata.Default()
	cfg.PMUs = 1
	cfg.Duration = 5 * time.Minute
	chans := pmudata.Generate(cfg)
	o := idleTestOptions()
	o.MemTableSize = 64 << 20 // the whole stream stays in the memtable until the idle flush
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	bulkLoad(t, p, chans)
	// At the stream's start nothing has ended: the idle pass flushes, nothing to compact.
	for range 3 {
		if err := p.sealAll(cfg.Start); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.compactedWindows(); n != 0 {
		t.Fatalf("idle passes with nothing sealed compacted %d windows", n)
	}
	if s := p.Stats(); s.Points == 0 {
		t.Fatal("nothing stored")
	}
	// Sealed while in the memtable: the flush drops the blocks itself.
	p2 := openTest(t, t.TempDir(), o)
	defer p2.Close()
	bulkLoad(t, p2, chans)
	later := cfg.Start.Add(cfg.Duration + time.Hour)
	for range 3 {
		if err := p2.sealAll(later); err != nil {
			t.Fatal(err)
		}
	}
	if n := p2.compactedWindows(); n != 0 {
		t.Fatalf("blocks sealed in the memtable: idle pass compacted %d windows, want none", n)
	}
	flash := p2.Stats().FlashBytesWritten
	for range 3 {
		later = later.Add(10 * time.Second)
		if err := p2.sealAll(later); err != nil {
			t.Fatal(err)
		}
	}
	if f := p2.Stats().FlashBytesWritten; f != flash {
		t.Fatalf("idle passes wrote %d bytes to flash: want none", f-flash)
	}
}

// TestIdleCompactionYieldsToWrites checks that the idle compaction stops between
// windows when writes come back, and checks the rest at the next idle moment.
func TestIdleCompactionYieldsToWrites(t *testing.T) {
	cfg := pmudata.Default()
	cfg.PMUs = 1
	cfg.Duration = 10 * time.Minute
	first := pmudata.Generate(cfg)
	cfg.Start = cfg.Start.Add(time.Hour) // the next window
	second := pmudata.Generate(cfg)
	p := openTest(t, t.TempDir(), idleTestOptions())
	defer p.Close()
	bulkLoad(t, p, first)
	bulkLoad(t, p, second)
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	now := cfg.Start.Add(cfg.Duration + time.Hour)
	if err := p.sealAll(now); err != nil {
		t.Fatal(err)
	}
	late := first[0].Points.Slice(0, 1) // an overwrite: a write, whatever it stores
	ref := ShardRef{ID: quanta.ShardID(quanta.QFI, first[0].Key(), q0(p, first[0])), Start: q0(p, first[0])}
	p.compact.afterWindow = func() {
		p.compact.afterWindow = nil
		if err := p.Append(ref, first[0].Key(), late); err != nil {
			t.Error(err)
		}
		p.appended.Add(1) // an overwrite stores no new point; count it as a write
	}
	if err := p.sealAll(now); err != nil { // idle: compacts one window, then sees the write
		t.Fatal(err)
	}
	if n := p.compactedWindows(); n != 1 {
		t.Fatalf("the idle pass compacted %d windows before writes came back, want 1", n)
	}
	if n := p.pendingWindows(); n != 1 {
		t.Fatalf("after writes came back %d windows wait for a check, want 1", n)
	}
	for range 3 { // a pass that sees the write, then idle again
		now = now.Add(10 * time.Second)
		if err := p.sealAll(now); err != nil {
			t.Fatal(err)
		}
	}
	// The second window is checked at the next idle moment (the first window's
	// compaction took level 0 whole, so it may find nothing left to drop).
	if n := p.pendingWindows(); n != 0 {
		t.Fatalf("after the writes stopped again %d windows still wait for a check, want none", n)
	}
}
