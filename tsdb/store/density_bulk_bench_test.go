package store

import (
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/pmudata"
	"github.com/tsdht/tsdht/quanta"
)

// BenchmarkPMUBulkBytesPerPoint loads the reference PMU hour (internal/pmudata, noise
// 1x) into a store as `tsdht put` does after the fact — one series at a time, batches
// of 10,000 points split by quantum, one AppendBatch each — with the background
// sealer's pass (sealPass) every sealEvery points on a clock an hour after the data,
// then runs passes as an idle node would (the seal, then idle flush and compaction),
// and reports the growth of the whole data directory per point:
//
//	load-B/point    right after the load
//	idle-B/point    after the idle passes: everything sealed, nothing forced
//	flash-B/point   bytes the engine wrote to the device per point (WAL, flushes,
//	                compactions: Stats.FlashBytesWritten)
//	flash/raw       flash bytes ÷ 16 bytes a point: the write amplification
//
// -v logs pebble's metrics after the load and after the idle passes.
func BenchmarkPMUBulkBytesPerPoint(b *testing.B) {
	cfg := pmudata.Default()
	chans := pmudata.Generate(cfg)
	for b.Loop() {
		benchPMUBulk(b, cfg, chans, 500_000)
	}
}

func benchPMUBulk(b *testing.B, cfg pmudata.Config, chans []pmudata.Channel, sealEvery int64) {
	dir := b.TempDir()
	o := DefaultPebbleOptions()
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
				if err := p.sealPass(now); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	perPoint := func(n int64) float64 { return float64(n) / float64(points) }
	settle(b, p)
	loaded := usage(b, dir)
	if testing.Verbose() {
		b.Logf("after the load:\n%s", p.db.Metrics())
	}
	for range 12 {
		now = now.Add(10 * time.Second)
		if err := p.sealPass(now); err != nil {
			b.Fatal(err)
		}
	}
	settle(b, p)
	idle := usage(b, dir)
	if testing.Verbose() {
		b.Logf("after the idle passes:\n%s", p.db.Metrics())
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
	deadline := time.Now().Add(time.Minute)
	for {
		m := p.db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 && m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pebble did not settle in a minute:\n%s", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
