package tsdb

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkRollup measures aggregates answered from rollups, asked by a thin client
// over TCP of an 18-node local cluster on disk stores, once the homes pulled:
//
//   - day60Hz: one day of 60 Hz in one series (5,184,000 points, 10 s quanta), mean,
//     min and max per minute for the whole day (1-minute level);
//   - year1min: one year at one point per minute (525,600 points, 1 h quanta), mean,
//     min and max per day for the whole year (1-day level);
//   - year1min10s: the same year in 10 s quanta (3,153,600 quanta, 525,600 shards
//     holding points), KFI: what the homes pull is then 6 times larger, the query the
//     same.
//
// It logs the share of windows the homes answered and the load average.
//
//	go test -run '^$' -bench Rollup -benchtime 10x ./tsdb
func BenchmarkRollup(b *testing.B) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		b.Run("day60Hz/id="+f.String(), func(b *testing.B) { benchRollup(b, f, false, 10) })
		b.Run("year1min/id="+f.String(), func(b *testing.B) { benchRollup(b, f, true, 3600) })
	}
	b.Run("year1min10s/id=kfi", func(b *testing.B) { benchRollup(b, quanta.KFI, true, 10) })
}

func benchRollup(b *testing.B, f quanta.Format, year bool, q quanta.Quantum) {
	ctx := context.Background()
	lc, err := StartLocal(ctx, 18, b.TempDir(), func(i int, cfg *Config) {
		cfg.DHT.Format = f
		cfg.DHT.Quantum = q
		cfg.CallTimeout = 30 * time.Second // a loaded machine must not fail the set-up writes
		cfg.Rollups = RollupConfig{PullInterval: time.Hour}
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1, Quantum: q})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Store = st
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	minute, day := int64(time.Minute), int64(24*time.Hour)
	key, every, span := "pmu/freq", minute, day
	var t0 int64
	var pts series.Points
	batch := 60 * 600
	if year {
		key, every, span = "site/temp", day, 365*day
		t0 = agg.WindowStart(time.Now().UnixNano(), day) - span - day
		for t := t0; t < t0+span; t += minute {
			pts.AppendFloat(t, float64(t%7919)/10)
		}
		batch = 24 * 60 * 7
	} else {
		t0 = agg.WindowStart(time.Now().UnixNano()-span-int64(time.Hour), minute)
		pts = clustertest.SixtyHz(t0, int(span/int64(time.Second))*60)
	}
	n := pts.Len()
	for lo := 0; lo < n; lo += batch {
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, pts.Slice(lo, min(lo+batch, n)), PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, node := range lc.Nodes {
		if _, err := node.Store().(*store.Pebble).SealNow(time.Now().Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	cli, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	from, to := t0, t0+span
	fns := []agg.Fn{agg.Mean, agg.Min, agg.Max}
	want := int(span / every)
	ask := func() {
		tab, err := cli.Agg(ctx, key, from, to, every, fns, wire.GetOptions{})
		if err != nil || len(tab.Rows) != want {
			b.Fatalf("agg: %d rows (want %d), %v", len(tab.Rows), want, err)
		}
	}
	// The homes start keeping the series when first asked: one window is enough (the
	// raw path over a year of 10 s quanta, 3 million shards, outlasts a call's deadline).
	if _, err := lc.Nodes[0].Coordinator().Aggregate(ctx, key, from, from+every, every, GetOptions{}); err != nil {
		b.Fatal(err)
	}
	series := 0
	for _, node := range lc.Nodes {
		series += node.RollupStats().Series
	}
	b.Logf("the homes keep %d series", series)
	start := time.Now()
	for range 100 { // a pass pulls at most 64 rounds per series: until one pulls nothing
		before := rollupPulled(lc)
		for _, node := range lc.Nodes {
			if err := node.RollupNow(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if rollupPulled(lc) == before {
			break
		}
	}
	pulled := time.Since(start)
	h0, m0 := rollupHits(lc)
	b.Run("agg", func(b *testing.B) {
		for b.Loop() {
			ask()
		}
	})
	h1, m1 := rollupHits(lc)
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("%d points; homes pulled in %v; windows from rollups %d, from raw shards %d; loadavg %s",
		n, pulled.Round(time.Millisecond), h1-h0, m1-m0, strings.TrimSpace(string(load)))
}
