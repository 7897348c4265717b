package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/internal/pmudata"
	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
)

// BenchmarkPMUBulkBytesPerPoint loads the reference PMU hour (internal/pmudata, noise
// 1x) into a store as `tsdht put` does after the fact — one series at a time, batches
// of 10,000 points split by quantum, one AppendBatch each — with a pass of the
// background sealer (sealPass, on a clock an hour after the data) every 100,000 or
// 1,000,000 points of the load, or none until the load is over (seal-after-load: the
// sealer's tick came after a fast load), then runs passes as an idle node would (the
// seal, then the idle flush and compaction), and reports the growth of the whole data
// directory per point:
//
//	load-B/point    right after the load
//	idle-B/point    after the idle passes: everything sealed, nothing forced
//	flash-B/point   bytes the engine wrote to the device per point (WAL, flushes,
//	                compactions: Stats.FlashBytesWritten)
//	flash/raw       flash bytes ÷ 16 bytes a point: the write amplification
//
// Each figure is taken once pebble has no compaction running and has deleted the files
// its compactions made obsolete. Sub-benchmarks: the default options, and
// NoIdleCompaction (the replaced blocks left to pebble's own compactions).
// -v logs pebble's metrics after the load and after the idle passes.
func BenchmarkPMUBulkBytesPerPoint(b *testing.B) {
	cfg := pmudata.Default()
	chans := pmudata.Generate(cfg)
	for _, every := range []int64{100_000, 1_000_000, 1 << 62} {
		for _, off := range []bool{false, true} {
			name := "idle-compaction"
			if off {
				name = "no-idle-compaction"
			}
			cadence := fmt.Sprintf("seal-every-%d", every)
			if every == 1<<62 {
				cadence = "seal-after-load"
			}
			b.Run(cadence+"/"+name, func(b *testing.B) {
				for b.Loop() {
					benchPMUBulk(b, cfg, chans, every, off)
				}
			})
		}
	}
}

func benchPMUBulk(b *testing.B, cfg pmudata.Config, chans []pmudata.Channel, sealEvery int64, noIdle bool) {
	dir := b.TempDir()
	o := DefaultPebbleOptions()
	o.NoIdleCompaction = noIdle
	o.Sync = SyncNone
	o.SealInterval = -1 // the passes run below
	o.EnforceInterval = -1
	p := openTest(b, dir, o)
	defer p.Close()
	before := usage(b, dir)
	q := quanta.Quantum(10)
	now := cfg.Start.Add(cfg.Duration + time.Hour)
	points, sinceSeal := int64(0), int64(0)
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
				b.Fatal(err)
			}
			points += int64(part.Len())
			sinceSeal += int64(part.Len())
			if sinceSeal >= sealEvery {
				sinceSeal = 0
				if err := p.sealAll(now); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	perPoint := func(n int64) float64 { return float64(n) / float64(points) }
	settle(b, p)
	loaded := usage(b, dir)
	if testing.Verbose() {
		logEngine(b, p, "after the load")
	}
	for range 12 {
		now = now.Add(10 * time.Second)
		if err := p.sealAll(now); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, p)
	idle := usage(b, dir)
	if testing.Verbose() {
		logEngine(b, p, "after the idle passes")
		listDir(b, dir)
	}
	st := p.Stats()
	if st.Points != points {
		b.Fatalf("Stats.Points = %d, want %d", st.Points, points)
	}
	b.ReportMetric(perPoint(loaded.total()-before.total()), "load-B/point")
	b.ReportMetric(perPoint(idle.total()-before.total()), "idle-B/point")
	b.ReportMetric(perPoint(st.FlashBytesWritten), "flash-B/point")
	b.ReportMetric(perPoint(st.FlashBytesWritten)/16, "flash/raw")
	b.ReportMetric(float64(p.compactedWindows()), "idle-compactions")
}

// settle waits until pebble has no compaction running and has deleted the files
// compactions made obsolete, so that a directory's size is not caught mid-compaction.
func settle(tb testing.TB, p *Pebble) {
	tb.Helper()
	var m *pebble.Metrics
	if !testutil.Poll(time.Minute, func() bool {
		m = p.db.Metrics()
		return m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 && m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0
	}) {
		tb.Fatalf("pebble did not settle in a minute:\n%s", m)
	}
}

// logEngine logs pebble's metrics, its count of deletions in tables, what the tables
// hold in the pair family, and what is live there (a scan): the difference is what
// the seals replaced and a compaction has not dropped yet.
func logEngine(tb testing.TB, p *Pebble, when string) {
	tb.Helper()
	m := p.db.Metrics()
	held, err := p.db.EstimateDiskUsage([]byte{famPair}, []byte{famPair + 1})
	if err != nil {
		tb.Fatal(err)
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		tb.Fatal(err)
	}
	var live [kindEnd]int64
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		id := k[1:]
		n := 8 + quanta.IDLen + 1 + int(id[8+quanta.IDLen]) + 1
		live[id[n-1+1]] += int64(len(k) + len(it.Value()))
	}
	if err := it.Close(); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%s:\n%s\ntables: %d deletions; pair family %d bytes on disk, live (uncompressed) summaries %d, chunks %d, blocks %d",
		when, m, m.Keys.TombstoneCount, held, live[kindSummary], live[kindChunk], live[kindBlock])
}
